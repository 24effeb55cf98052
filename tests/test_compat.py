"""What differs between Spark versions (dspark_json/compat.py), on the pyspark installed, and the
stream reader driven the way each Spark drives it. CI runs this file on the oldest supported
pyspark too (`make test-oldest`)."""

import re
import tomllib
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest
from pyspark.sql.types import ArrayType, StringType, StructField, StructType, TimestampType

from dspark_json import compat
from dspark_json.inputs import listing
from dspark_json.inputs.listing import Position
from dspark_json.options import Options, Query
from dspark_json.source import PromptStreamReader
from tests.helpers import write_prompts

SPARK = tuple(int(part) for part in pyspark.__version__.split(".")[:2])
needs_read_limits = pytest.mark.skipif(
    not compat.ADMISSION_CONTROL, reason=f"Spark {pyspark.__version__} passes no read limits"
)


def test_the_api_found_is_the_one_this_spark_has():
    has_limits = SPARK >= (4, 2)
    assert has_limits is compat.ADMISSION_CONTROL, pyspark.__version__


def test_arrow_schema_keeps_timestamps_in_utc_at_any_depth():
    schema = StructType(
        [
            StructField("at", TimestampType(), nullable=False),
            StructField("inner", StructType([StructField("at", TimestampType())])),
            StructField("list", ArrayType(TimestampType())),
            StructField("text", StringType()),
        ]
    )
    arrow = compat.to_arrow_schema(schema)
    utc = pa.timestamp("us", tz="UTC")
    assert arrow.field("at").type == utc and not arrow.field("at").nullable
    assert arrow.field("inner").type.field("at").type == utc
    assert arrow.field("list").type.value_type == utc
    assert arrow.field("text").type == pa.string()


def test_without_a_limit_from_spark_the_options_caps_hold():
    assert compat.read_caps(None, max_rows=10, max_files=None) == (10, None)
    assert compat.read_caps(None, max_rows=None, max_files=2) == (None, 2)


@needs_read_limits
def test_the_limit_spark_passes_lifts_or_narrows_the_caps():
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMaxRows

    assert compat.read_caps(ReadAllAvailable(), max_rows=10, max_files=2) == (None, None)
    assert compat.read_caps(ReadMaxRows(5), max_rows=10, max_files=2) == (5, 2)
    assert compat.read_caps(ReadMaxRows(50), max_rows=10, max_files=None) == (10, None)
    assert compat.read_caps(ReadMaxFiles(1), max_rows=None, max_files=3) == (None, 1)
    assert compat.default_read_limit(10, 2) == ReadMaxRows(10)
    assert compat.default_read_limit(None, 2) == ReadMaxFiles(2)
    assert compat.default_read_limit(None, None) == ReadAllAvailable()


def test_a_trigger_with_availablenow_and_another_is_refused():
    with pytest.raises(ValueError, match="availableNow takes no other trigger"):
        compat.start(None, {"availableNow": True, "processingTime": "1 second"})  # type: ignore[arg-type]


# The stream reader, driven as Spark drives it (pyspark/sql/streaming/
# python_streaming_source_runner.py and MicroBatchExecution). Each micro-batch, Spark 4.2+
# calls latestOffset(start, limit), reportLatestOffset(), then partitions(start, end); Spark
# 4.0/4.1 call latestOffset() and partitions(start, end), and after a restart plan an empty
# range at the last offset of the checkpoint (AcceptsLatestSeenOffset) before anything else.


@pytest.fixture
def listings(monkeypatch):
    """How many times the input directory is listed."""
    calls = []
    real = listing._scan  # every listing of a directory, local (os.scandir) or not (pyarrow)

    def counted(directory, after, storage):
        calls.append(directory)
        return real(directory, after, storage)

    monkeypatch.setattr(listing, "_scan", counted)
    return calls


def make_reader(directory, **options):
    raw = {"endpoint": "http://127.0.0.1:9", "prompts": str(directory), "partitionSize": "4"}
    query = Query(options=Options.parse({**raw, **{k: str(v) for k, v in options.items()}}))
    return PromptStreamReader(query, StructType([]))


def prompt_files(directory, sizes):
    start = 0
    for n, size in enumerate(sizes):
        rows = [{"custom_id": f"r{i:03d}", "prompt": f"p{i}"} for i in range(start, start + size)]
        write_prompts(directory, f"{n:04d}.jsonl", rows)
        start += size


def rows_planned(parts):
    return sum(seg.end - seg.start for p in parts for seg in p.segments)


def run_like_spark_4_0(reader, start):
    """One trigger as Spark 4.0/4.1 run it: the batch's rows, and its end offset."""
    end = reader.latestOffset()
    if end == start:
        return 0, end
    parts = reader.partitions(start, end)
    reader.commit(end)
    return rows_planned(parts), end


def run_like_spark_4_2(reader, start):
    """One trigger as Spark 4.2+ run it."""
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    latest = reader.reportLatestOffset()
    assert Position.from_offset(latest) >= Position.from_offset(end)
    if end == start:
        return 0, end
    parts = reader.partitions(start, end)
    reader.commit(end)
    return rows_planned(parts), end


def drain(reader, run, start):
    sizes = []
    while True:
        rows, end = run(reader, start)
        if not rows:
            return sizes, end
        sizes.append(rows)
        start = end


SHAPES = [
    pytest.param(run_like_spark_4_0, id="spark-4.0-calls"),
    pytest.param(run_like_spark_4_2, id="spark-4.2-calls", marks=needs_read_limits),
]


@pytest.mark.parametrize("run", SHAPES)
def test_max_records_cap_every_batch_and_the_directory_is_listed_once_per_batch(
    tmp_path, listings, run
):
    prompt_files(tmp_path, [15, 10])
    reader = make_reader(tmp_path, maxRecordsPerTrigger=10)
    listings.clear()
    sizes, end = drain(reader, run, reader.initialOffset())
    assert sizes == [10, 10, 5]
    assert end == {"file": "0001.jsonl", "row": 10, "batches": 3}
    # Three batches and the trigger that found nothing: one listing each, not three.
    assert len(listings) == 4


@pytest.mark.parametrize("run", SHAPES)
def test_max_files_caps_every_batch(tmp_path, run):
    prompt_files(tmp_path, [3, 4, 5])
    reader = make_reader(tmp_path, maxFilesPerTrigger=2)
    sizes, _ = drain(reader, run, reader.initialOffset())
    assert sizes == [7, 5]


def test_after_a_restart_spark_4_0_calls_continue_from_the_checkpoint(tmp_path, listings):
    """A new reader knows no start: Spark 4.0/4.1 give it the checkpoint's last offset as an
    empty range, then run the batch that was not committed, then ask for the next one."""
    prompt_files(tmp_path, [15, 10])
    first = make_reader(tmp_path, maxRecordsPerTrigger=10)
    _, batch_0 = run_like_spark_4_0(first, first.initialOffset())
    batch_1 = first.latestOffset()  # planned and logged, then the process dies

    again = make_reader(tmp_path, maxRecordsPerTrigger=10)
    listings.clear()
    assert again.partitions(batch_1, batch_1) == []  # setLatestSeenOffset: no listing
    assert listings == []
    assert rows_planned(again.partitions(batch_0, batch_1)) == 10  # the replay
    # The last 5 rows: the third batch, counted from the checkpoint's offset.
    assert again.latestOffset() == {"file": "0001.jsonl", "row": 10, "batches": 3}


@needs_read_limits
def test_available_now_stops_at_what_was_there_when_it_was_prepared(tmp_path, listings):
    prompt_files(tmp_path, [15, 10])
    reader = make_reader(tmp_path, maxRecordsPerTrigger=10)
    listings.clear()
    reader.prepareForTriggerAvailableNow()
    write_prompts(tmp_path, "0002.jsonl", [{"prompt": "late"}])
    sizes, end = drain(reader, run_like_spark_4_2, reader.initialOffset())
    assert sizes == [10, 10, 5] and end == {"file": "0001.jsonl", "row": 10, "batches": 3}
    assert len(listings) == 4  # the first batch uses the listing taken when prepared


def test_the_cluster_install_lists_every_dependency_but_pyspark():
    root = Path(__file__).resolve().parents[1]
    wanted = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    page = (root / "docs" / "getting-started" / "cluster.md").read_text()
    line = next(ln for ln in page.splitlines() if ln.startswith('pip install "pyarrow'))
    listed = re.findall(r'"([^"]+)"', line)
    assert sorted(listed) == sorted(d for d in wanted if not d.startswith("pyspark"))
    assert "pip install --no-deps dist/dspark_json-*.whl" in page
