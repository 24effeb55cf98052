"""The ``dspark-delta`` sink in Spark (local): the tasks write the data files, the driver commits
each micro-batch once; a replayed batch adds nothing and leaves no file behind."""

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from dspark_json.compat import start
from tests.helpers import write_prompts

pytestmark = pytest.mark.spark

SCHEMA = json.dumps(
    {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}
)


def on_disk(table: Path) -> set[str]:
    return {p.relative_to(table).as_posix() for p in table.rglob("*.parquet")}


def in_log(table: Path) -> set[str]:
    prefix = f"{table}/"
    return {uri.removeprefix(prefix) for uri in DeltaTable(str(table)).file_uris()}


def stream(spark, url, work):
    df = (
        spark.readStream.format("dspark-json")
        .option("endpoint", url)
        .option("prompts", str(work / "in"))
        .option("journal", str(work / "journal"))
        .option("responseFormat", SCHEMA)
        .option("maxRecordsPerTrigger", "20")
        .option("partitionSize", "10")
        .load()
    )
    writer = (
        df.writeStream.format("dspark-delta")
        .option("checkpointLocation", str(work / "checkpoint"))
        .option("partitionBy", "lang")
    )
    query = start(writer, {"availableNow": True}, path=str(work / "table"))
    query.awaitTermination()
    assert query.exception() is None


def test_stream_tasks_write_files_driver_commits_once_and_a_replay_adds_nothing(
    spark, simulator, tmp_path
):
    rows = [
        {"custom_id": f"q{i:02d}", "prompt": f"Question {i}", "lang": ["en", "de"][i % 2]}
        for i in range(40)
    ]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    stream(spark, simulator.url, tmp_path)
    table = tmp_path / "table"
    delta = DeltaTable(str(table))
    assert delta.version() == 1  # two micro-batches of 20, one commit each
    assert delta.metadata().partition_columns == ["lang"]
    got = delta.to_pyarrow_table()
    assert sorted(got.column("custom_id").to_pylist()) == [r["custom_id"] for r in rows]
    assert set(got.column("_status").to_pylist()) == {"ok"}
    # Written by the tasks: a file per (task, partition value), named by the task's partition.
    files = on_disk(table)
    assert files == in_log(table)
    assert {f.split("/")[1][:10] for f in files} == {"part-00000", "part-00001"}
    assert {f.split("/")[0] for f in files} == {"lang=en", "lang=de"}
    # The process died after the Delta commit of batch 1, before Spark recorded it: the restart
    # replays batch 1 (its answers from the journal), whose transaction the table holds.
    for name in ("1", ".1.crc"):
        (tmp_path / "checkpoint" / "commits" / name).unlink(missing_ok=True)
    asked = simulator.stats()["chat_completions"]
    stream(spark, simulator.url, tmp_path)
    assert simulator.stats()["chat_completions"] == asked
    assert DeltaTable(str(table)).version() == 1
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 40
    assert on_disk(table) == files  # the replay's files were deleted
    assert (tmp_path / "checkpoint" / "commits" / "1").exists()


def test_batch_write_appends_and_overwrites_and_options_are_checked(spark, tmp_path):
    path = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "a"), (2, "b")], "n int, s string")
    df.write.format("dspark-delta").mode("append").save(path)
    df.write.format("dspark-delta").mode("append").save(path)
    assert DeltaTable(path).to_pyarrow_table().num_rows == 4
    spark.createDataFrame([(3, "c")], "n int, s string").write.format("dspark-delta").mode(
        "overwrite"
    ).save(path)
    assert DeltaTable(path).to_pyarrow_table().to_pylist() == [{"n": 3, "s": "c"}]
    with pytest.raises(
        Exception,
        match=r"no option 'partitonby' \(as Spark passes it, lowercased\)\. Did you mean "
        r"'partitionBy'",
    ):
        df.write.format("dspark-delta").option("partitonBy", "s").mode("append").save(path)
    with pytest.raises(Exception, match="is partitioned by 'nothing'"):
        df.write.format("dspark-delta").option("partitionBy", "s").mode("append").save(path)
    with pytest.raises(Exception, match="needs the table's location"):
        df.write.format("dspark-delta").mode("append").save()
