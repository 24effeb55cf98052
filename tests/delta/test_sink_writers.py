"""The ``dspark-delta`` sink's writers driven as Spark drives them, without Spark: the options
checked on the driver, each task's files, one idempotent commit per micro-batch, a replay's
files deleted, an aborted batch leaving nothing; and the batch writer's append and overwrite."""

import json
import logging
import re

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql.types import StringType, StructField, StructType

from dspark_json.delta.files import DataFile, partition_error
from dspark_json.delta.sink import SINK_FORMAT, DeltaFiles, DeltaSink
from dspark_json.errors import OptionError

SCHEMA = StructType([StructField("id", StringType()), StructField("lang", StringType())])
FILE_NAME = re.compile(r"(lang=[^/]+/)?part-00000-[0-9a-f-]{36}-c000\.snappy\.parquet")


def rows(*ids, lang="en"):
    return pa.record_batch({"id": list(ids), "lang": [lang] * len(ids)})


@pytest.fixture
def checkpoint(tmp_path):
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    (directory / "metadata").write_text(json.dumps({"id": "q-1"}))
    return f"{directory}/"


def stream(table, checkpoint, **options):
    return DeltaSink({"path": table, "checkpointLocation": checkpoint, **options}).streamWriter(
        SCHEMA, False
    )


def parquet_files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.parquet"))


def ids(table):
    return sorted(r["id"] for r in DeltaTable(table).to_pyarrow_table().to_pylist())


def test_each_micro_batch_commits_once_and_a_replay_leaves_nothing_behind(tmp_path, checkpoint):
    table = str(tmp_path / "t")
    writer = stream(table, checkpoint, partitionBy=" lang ")
    first = [writer.write(iter([rows("a", "b"), rows("c", lang="de")])), DeltaFiles(), None]
    assert all(FILE_NAME.fullmatch(f.path) for f in first[0].files)
    writer.commit(first, 0)
    assert ids(table) == ["a", "b", "c"]
    delta = DeltaTable(table)
    assert delta.transaction_version("dspark-json:q-1") == 0
    assert delta.metadata().partition_columns == ["lang"]
    on_disk = parquet_files(tmp_path / "t")
    # The same micro-batch again (a restart): its new files are deleted, nothing is committed.
    replay = [stream(table, checkpoint).write(iter([rows("a", "b"), rows("c", lang="de")]))]
    assert parquet_files(tmp_path / "t") != on_disk
    stream(table, checkpoint).commit(replay, 0)
    assert parquet_files(tmp_path / "t") == on_disk
    assert DeltaTable(table).version() == delta.version() and ids(table) == ["a", "b", "c"]
    # The next one commits.
    writer.commit([writer.write(iter([rows("d")]))], 1)
    assert ids(table) == ["a", "b", "c", "d"]
    assert DeltaTable(table).transaction_version("dspark-json:q-1") == 1


def test_an_aborted_micro_batch_deletes_its_files(tmp_path, checkpoint, caplog):
    table = str(tmp_path / "t")
    writer = stream(table, checkpoint)
    writer.commit([writer.write(iter([rows("a")]))], 0)
    on_disk = parquet_files(tmp_path / "t")
    failed = [writer.write(iter([rows("b", "c")])), writer.write(iter([rows("d")])), None]
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        writer.abort(failed, 1)
    assert parquet_files(tmp_path / "t") == on_disk and ids(table) == ["a"]
    assert "batch 1 failed; 2 data file(s) of it deleted, nothing committed" in caplog.text


def test_the_batch_writer_appends_or_overwrites_in_one_commit(tmp_path, caplog):
    table = str(tmp_path / "t")
    append = DeltaSink({"path": table}).writer(SCHEMA, False)
    append.commit([append.write(iter([rows("a")])), append.write(iter([rows("b")]))])
    assert ids(table) == ["a", "b"] and DeltaTable(table).version() == 0
    overwrite = DeltaSink({"path": table}).writer(SCHEMA, True)
    overwrite.commit([overwrite.write(iter([rows("c")]))])
    assert ids(table) == ["c"]
    failed = DeltaSink({"path": table}).writer(SCHEMA, False)
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        failed.abort([failed.write(iter([rows("x")]))])
    assert ids(table) == ["c"] and len(parquet_files(tmp_path / "t")) == 3
    assert "the write failed; 1 data file(s) of it deleted" in caplog.text


def test_a_commit_message_carries_the_files_a_task_wrote():
    message = DeltaFiles()
    assert message.files == [] and DeltaFiles().files is not message.files
    one = DataFile("a.parquet", 1, {}, 0, "{}", 1)
    assert DeltaFiles([one]).files == [one]


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        (
            {"path": "/t", "checkpointLocation": "/c", "partitionby": "x", "mergeSchema": "1"},
            True,
            "format 'dspark-delta' has no option 'mergeschema' (as Spark passes it, lowercased). "
            "Its options: path, "
            "checkpointLocation, partitionBy, storageOptions.",
        ),
        (
            {"path": "/t", "checkpointlocaton": "/c"},
            True,
            "format 'dspark-delta' has no option 'checkpointlocaton' (as Spark passes it, "
            "lowercased). Did you mean 'checkpointLocation'? Its options: path, "
            "checkpointLocation, partitionBy, storageOptions.",
        ),
        (
            {"checkpointLocation": "/c"},
            True,
            "format 'dspark-delta' needs the table's location: .start(path) (streaming), "
            ".save(path) (batch), or .option('path', ...).",
        ),
        (
            {"path": "/t", "checkpointLocation": ""},
            True,
            "format 'dspark-delta' needs .option('checkpointLocation', ...): the query id kept "
            "there makes each micro-batch's commit idempotent.",
        ),
        (
            {"path": "/t", "partitionBy": "id, lang"},
            False,
            "format 'dspark-delta': partitionBy names every column; a data file needs at least "
            "one other column.",
        ),
    ],
    ids=["unknown", "misspelt", "no-path", "no-checkpoint", "every-column"],
)
def test_options_are_checked_on_the_driver(tmp_path, options, streaming, message):
    options = {k: v.replace("/t", str(tmp_path / "t")) for k, v in options.items()}
    sink = DeltaSink(options)
    with pytest.raises(OptionError) as caught:
        sink.streamWriter(SCHEMA, False) if streaming else sink.writer(SCHEMA, False)
    assert str(caught.value) == message.replace("/t", str(tmp_path / "t"))


def test_a_streaming_write_only_appends():
    with pytest.raises(OptionError) as caught:
        DeltaSink({"path": "/t", "checkpointLocation": "/c"}).streamWriter(SCHEMA, True)
    assert str(caught.value) == (
        f"format {SINK_FORMAT!r} appends: use outputMode('append'), not 'complete'."
    )


def test_an_existing_table_keeps_its_partitioning(tmp_path, checkpoint):
    table = str(tmp_path / "t")
    first = stream(table, checkpoint, partitionBy="lang")
    first.commit([first.write(iter([rows("a")]))], 0)
    unsaid = stream(table, checkpoint)  # partitionBy left out: the table's is used
    unsaid.commit([unsaid.write(iter([rows("b", lang="de")]))], 1)
    assert any(p.startswith("lang=de/") for p in parquet_files(tmp_path / "t"))
    with pytest.raises(OptionError) as caught:
        stream(table, checkpoint, partitionBy="id")
    assert str(caught.value) == (
        f"option partitionBy='id', but the Delta table {table} is partitioned by 'lang': leave "
        "partitionBy out (the table's partitioning is used) or write to a new table."
    )
    plain = str(tmp_path / "plain")
    writer = DeltaSink({"path": plain}).writer(SCHEMA, False)
    writer.commit([writer.write(iter([rows("a")]))])
    with pytest.raises(OptionError, match="is partitioned by 'nothing'"):
        DeltaSink({"path": plain, "partitionBy": "lang"}).writer(SCHEMA, False)


def test_which_columns_can_partition_a_table():
    schema = pa.schema(
        [
            ("s", pa.string()),
            ("big", pa.large_string()),
            ("n", pa.int16()),
            ("ok", pa.bool_()),
            ("day", pa.date32()),
            ("x", pa.float64()),
            ("at", pa.timestamp("us", tz="UTC")),
        ]
    )
    for name in ("s", "big", "n", "ok", "day"):
        assert partition_error(schema, [name]) is None, name
    assert partition_error(schema, ["x"]) == (
        "partitionBy column 'x' is double; partition by a string, integer, boolean or date column"
    )
    assert partition_error(schema, ["at"]).startswith("partitionBy column 'at' is timestamp")
    assert partition_error(schema, ["lang"]) == (
        "partitionBy names column 'lang', which the DataFrame does not have (columns: s, big, n, "
        "ok, day, x, at)"
    )
