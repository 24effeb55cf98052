"""The sink's two halves without Spark: tasks write Parquet files into the table location
(files.py), the driver commits them in one Delta transaction (log.py); read back with delta-rs."""

import json
from datetime import UTC, date, datetime

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from dspark_json.delta.files import delete_files, partition_error, utc_timestamps, write_files
from dspark_json.delta.log import commit_files, committed_version
from dspark_json.errors import SchemaError


def batches(table, size=2):
    return table.to_batches(max_chunksize=size)


def commit(uri, table, *, partition_by=(), transaction=None, mode="append", task=0):
    files = write_files(batches(table), uri, partition_by=partition_by, task=task)
    schema = utc_timestamps(table.schema)
    commit_files(
        uri, files, schema=schema, partition_by=partition_by, transaction=transaction, mode=mode
    )
    return files


def data_files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.parquet"))


def test_files_committed_once_read_back_with_partitions_nulls_and_odd_values(tmp_path):
    uri = str(tmp_path / "t")
    table = pa.table(
        {
            "custom_id": ["a", "b", "c", "d", "e", "f"],
            "lang": ["en", "a:b c/d%", None, "", "en", "été"],
            "n": pa.array([1, 2, 3, 4, 5, 6], pa.int32()),
        }
    )
    files = commit(uri, table, partition_by=("lang",), transaction=("app", 0))
    # One file per partition value met (null and "" are the same partition, as in Spark).
    assert len(files) == 4 and sum(f.rows for f in files) == 6
    delta = DeltaTable(uri)
    assert delta.version() == 0 and delta.metadata().partition_columns == ["lang"]
    assert committed_version(uri, "app") == 0
    got = delta.to_pyarrow_table().sort_by("custom_id").to_pylist()
    assert [(r["custom_id"], r["lang"], r["n"]) for r in got] == [
        ("a", "en", 1),
        ("b", "a:b c/d%", 2),
        ("c", None, 3),
        ("d", None, 4),
        ("e", "en", 5),
        ("f", "été", 6),
    ]
    assert "lang=__HIVE_DEFAULT_PARTITION__" in {p.name for p in (tmp_path / "t").iterdir()}
    # Every file on disk is named by the log (nothing stray), and names are unique.
    assert len(data_files(tmp_path / "t")) == len(delta.file_uris()) == 4


def test_statistics_are_read_by_delta_rs_and_bound_the_values(tmp_path):
    uri = str(tmp_path / "t")
    ts = [
        datetime(2026, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC),
        datetime(2026, 1, 2, 0, 0, 0, 1_500, tzinfo=UTC),
        None,
    ]
    table = pa.table(
        {
            "n": pa.array([5, None, -3], pa.int64()),
            "x": [1.5, 2.5, float("nan")],
            "s": ["b" * 40, "abc", None],
            "d": [date(2020, 1, 1), date(2021, 6, 1), None],
            "at": pa.array(ts, pa.timestamp("us", tz="America/New_York")),
            "parsed": pa.array(
                [{"k": 1, "w": "z"}, None, {"k": 7, "w": None}],
                pa.struct([("k", pa.int64()), ("w", pa.string())]),
            ),
            "tags": [["a"], None, []],
        }
    )
    (file,) = commit(uri, table)
    stats = json.loads(file.stats)
    assert stats["numRecords"] == 3
    assert stats["minValues"]["n"] == -3 and stats["maxValues"]["n"] == 5
    assert "x" not in stats["minValues"]  # NaN: no bounds
    assert stats["minValues"]["s"] == "abc" and "s" not in stats["maxValues"]  # 40 chars: no max
    assert stats["minValues"]["d"] == "2020-01-01" and stats["maxValues"]["d"] == "2021-06-01"
    # Milliseconds, rounded outwards (the minimum down, the maximum up).
    assert stats["minValues"]["at"] == "2026-01-01T00:00:00.999Z"
    assert stats["maxValues"]["at"] == "2026-01-02T00:00:00.002Z"
    # A null struct counts as null in its fields.
    assert stats["nullCount"]["parsed"] == {"k": 1, "w": 2}
    assert stats["minValues"]["parsed"] == {"k": 1, "w": "z"}
    assert "tags" not in stats["nullCount"]
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()[0]
    assert actions["num_records"] == 3 and actions["min.n"] == -3 and actions["max.n"] == 5
    assert actions["null_count.parsed.w"] == 2
    # UTC timestamps, as Delta stores them.
    schema = DeltaTable(uri).to_pyarrow_table().schema
    assert schema.field("at").type == pa.timestamp("us", tz="UTC")


def test_a_new_column_widens_the_schema_and_a_changed_type_is_refused(tmp_path):
    uri = str(tmp_path / "t")
    one = pa.table({"id": ["a"], "parsed": pa.array([{"k": 1}])})
    commit(uri, one, transaction=("app", 0))
    two = pa.table({"id": ["b"], "parsed": pa.array([{"k": 2, "extra": "x"}]), "more": [1.0]})
    commit(uri, two, transaction=("app", 1))
    delta = DeltaTable(uri)
    rows = delta.to_pyarrow_table().sort_by("id").to_pylist()
    assert rows[0]["parsed"] == {"k": 1, "extra": None} and rows[0]["more"] is None
    assert rows[1]["parsed"] == {"k": 2, "extra": "x"} and rows[1]["more"] == 1.0
    assert committed_version(uri, "app") == 1
    version = delta.version()
    bad = pa.table({"id": ["c"], "parsed": pa.array([{"k": "not a number"}])})
    with pytest.raises(SchemaError, match=r"'parsed\.k' is long in the table, string here"):
        commit(uri, bad, transaction=("app", 2))
    assert DeltaTable(uri).version() == version and committed_version(uri, "app") == 1


def test_partitioning_must_match_the_table(tmp_path):
    uri = str(tmp_path / "t")
    table = pa.table({"id": ["a"], "lang": ["en"]})
    commit(uri, table, partition_by=("lang",))
    with pytest.raises(SchemaError, match="partitioned by \\['lang'\\]"):
        commit(uri, table)


def test_overwrite_replaces_the_rows(tmp_path):
    uri = str(tmp_path / "t")
    commit(uri, pa.table({"id": ["a", "b"]}))
    commit(uri, pa.table({"id": ["c"]}), mode="overwrite")
    assert DeltaTable(uri).to_pyarrow_table().to_pylist() == [{"id": "c"}]


def test_a_failing_task_leaves_no_file_and_uncommitted_files_are_not_in_the_table(tmp_path):
    uri = str(tmp_path / "t")
    commit(uri, pa.table({"id": ["a"], "lang": ["en"]}), partition_by=("lang",))

    def broken():
        yield pa.record_batch({"id": ["b"], "lang": ["de"]})
        yield pa.record_batch({"id": ["c"], "lang": ["en"]})
        raise RuntimeError("the task died")

    with pytest.raises(RuntimeError):
        write_files(broken(), uri, partition_by=("lang",))
    assert len(data_files(tmp_path / "t")) == 1
    # Files a batch wrote but never committed (a replay, a driver that died) are not read,
    # delete_files removes them, and so does a full vacuum.
    stray = write_files(
        batches(pa.table({"id": ["x"], "lang": ["en"]})), uri, partition_by=("lang",)
    )
    assert len(data_files(tmp_path / "t")) == 2
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 1
    delta = DeltaTable(uri)
    vacuumed = delta.vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
    )
    assert vacuumed == [stray[0].path]
    assert delete_files(uri, stray) == 0  # gone already
    assert len(data_files(tmp_path / "t")) == 1


def test_partition_columns_are_checked():
    schema = pa.schema([("id", pa.string()), ("score", pa.float64()), ("day", pa.date32())])
    assert partition_error(schema, ["day"]) is None
    assert "score' is double" in partition_error(schema, ["score"])
    assert "does not have" in partition_error(schema, ["lang"])
