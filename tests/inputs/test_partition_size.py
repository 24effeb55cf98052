"""Option partitionSize left to the planner: the rule, and the slots a session's settings give."""

import pytest
from pyspark.serializers import CloudPickleSerializer

from dspark_json.inputs.listing import (
    MAX_PARTITION_SIZE,
    MIN_PARTITION_SIZE,
    partition_size,
)
from dspark_json.source import DSparkJsonDataSource, session_slots, with_slots


@pytest.mark.parametrize(
    ("rows", "slots", "expected"),
    [
        (20_000, 2, MAX_PARTITION_SIZE),  # 5,000 each for 4 tasks: capped
        (6_000, 2, 1_500),  # 4 tasks: two per slot
        (1_200, 2, 300),
        (1_000, 2, MIN_PARTITION_SIZE),  # a small batch is cut as before
        (20_000, 64, MIN_PARTITION_SIZE),  # a wide cluster: 79 tasks, as before
        (100_000, 64, 782),  # 128 tasks for 64 slots
        (0, 2, MIN_PARTITION_SIZE),
        (20_000, None, MIN_PARTITION_SIZE),  # the slots not known: as before
    ],
)
def test_the_planner_shares_a_batch_by_twice_the_slots_within_bounds(rows, slots, expected):
    assert partition_size(rows, given=None, slots=slots) == expected


@pytest.mark.parametrize("rows", [1, 255, 1_000, 7_777, 50_000, 1_000_000])
@pytest.mark.parametrize("slots", [1, 2, 8, 64, 500])
def test_tasks_never_more_than_at_the_minimum_nor_fewer_than_the_slots_it_would_fill(rows, slots):
    tasks = -(-rows // partition_size(rows, given=None, slots=slots))
    before = -(-rows // MIN_PARTITION_SIZE)
    assert tasks <= before
    assert tasks >= min(before, slots)


def test_a_given_partition_size_keeps_its_meaning():
    assert partition_size(20_000, given=7, slots=2) == 7
    assert partition_size(10, given=9_000, slots=None) == 9_000


class _Conf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class _Session:
    """A session's settings only (what session_slots reads); no SparkContext, as Spark Connect."""

    def __init__(self, **values):
        self.conf = _Conf(values)

    @property
    def sparkContext(self):
        raise RuntimeError("no SparkContext in Spark Connect")


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"spark.master": "local[3]"}, 3),
        ({"spark.master": "local[4, 2]"}, 4),
        ({"spark.master": "local"}, 1),
        ({"spark.master": "local[*]"}, None),  # the server's cores: not known without a context
        ({"spark.master": "yarn", "spark.default.parallelism": "48"}, 48),
        (
            {
                "spark.master": "k8s://x",
                "spark.executor.instances": "8",
                "spark.executor.cores": "4",
            },
            32,
        ),
        (
            {
                "spark.master": "yarn",
                "spark.executor.instances": "8",
                "spark.executor.cores": "4",
                "spark.dynamicAllocation.enabled": "true",
            },
            None,
        ),
        ({"spark.master": "spark://h:7077"}, None),
    ],
)
def test_the_slots_come_from_the_sessions_settings_where_they_say(conf, expected):
    assert session_slots(_Session(**conf)) == expected


def test_the_slots_reach_the_planning_workers_with_the_registered_class():
    """Spark's registration pickles the class with cloudpickle: a class made by with_slots is
    pickled with its attributes, so that the worker that unpickles it reads the slots."""
    made = with_slots(DSparkJsonDataSource, 6)
    assert made.name() == "dspark-json" and issubclass(made, DSparkJsonDataSource)
    pickled = CloudPickleSerializer()  # what spark.dataSource.register pickles with
    assert pickled.loads(pickled.dumps(made)).task_slots == 6
    assert pickled.loads(pickled.dumps(DSparkJsonDataSource)).task_slots is None
    assert with_slots(DSparkJsonDataSource, None) is DSparkJsonDataSource


def test_a_replayed_offset_is_cut_as_it_was_planned(tmp_path):
    """A micro-batch Spark replays after a restart is cut as it was first planned, so that its
    journal entries are found: by the size its offset keeps; an offset without one was
    checkpointed when the default was a fixed 256."""
    from pyspark.sql.types import StructType

    from dspark_json.options import Options, Query
    from dspark_json.source import PromptStreamReader

    prompts = tmp_path / "prompts"
    prompts.mkdir()
    lines = (f'{{"custom_id": "r{i}", "prompt": "p"}}\n' for i in range(1_200))
    (prompts / "a.jsonl").write_text("".join(lines))
    options = Options.parse({"endpoint": "http://127.0.0.1:9", "prompts": str(prompts)})
    reader = PromptStreamReader(Query(options=options), StructType([]), slots=2)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["partitionSize"] == 300

    def sizes(offset):
        return [sum(s.end - s.start for s in p.segments) for p in reader.partitions(start, offset)]

    assert sizes(end) == [300] * 4
    before = {k: v for k, v in end.items() if k != "partitionSize"}
    assert sizes(before) == [256, 256, 256, 256, 176]
