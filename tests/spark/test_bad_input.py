"""The issue's Spark cases, as a user meets them: .load() and queries on a local Spark session,
with the simulator process on 127.0.0.1 and real files."""

from __future__ import annotations

import bz2
import gzip
import json
import shutil
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import PySparkException

from tests.helpers import REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark

DEEP = "[" * 100_000 + "]" * 100_000
KEY = "zq-hostile-spark-3b7c"


def reader(spark, simulator, prompts, **options):
    frame = (
        spark.read.format("dspark-json")
        .option("endpoint", simulator.url)
        .option("prompts", str(prompts))
        .option("responseFormat", json.dumps(REVIEW_SCHEMA))
    )
    for key, value in options.items():
        frame = frame.option(key, value)
    return frame


def test_load_names_a_bad_api_key_without_showing_it(spark, simulator, tmp_path):
    write_prompts(tmp_path, "a.jsonl", [{"prompt": "p"}])
    with pytest.raises(PySparkException) as caught:
        reader(spark, simulator, tmp_path, apiKey=f"{KEY}\r\nX-Injected: yes").load()
    text = str(caught.value)
    assert "'apiKey'" in text and "line break" in text
    assert KEY[:8] not in text and KEY[-8:] not in text


def test_load_fails_on_prompt_fields_model_and_input_model_naming_both_and_the_fix(
    spark, simulator, tmp_path
):
    """Field ``model`` is passed through as column ``input_model``: with a field
    ``input_model`` as well, the schema would have that column twice, which Spark refused at the
    first batch; ``.load()`` says so instead, sending nothing."""
    rows = [{"prompt": "p", "model": simulator.model}, {"prompt": "q", "input_model": "m1"}]
    write_prompts(tmp_path, "a.jsonl", rows)
    before = simulator.stats().get("chat_completions", 0)
    with pytest.raises(PySparkException) as caught:
        reader(spark, simulator, tmp_path).load().collect()
    text = str(caught.value)
    assert "field 'model' (first at " in text and "a.jsonl row 1)" in text
    assert "field 'input_model' (first at " in text and "a.jsonl row 2)" in text
    assert "Rename field 'input_model' in the prompt files" in text
    assert simulator.stats().get("chat_completions", 0) == before


def test_load_fails_on_a_missing_prompts_directory_and_an_unwritable_journal(
    spark, simulator, tmp_path
):
    missing = tmp_path / "not-there"
    with pytest.raises(PySparkException, match=f"names {missing}, which does not exist"):
        reader(spark, simulator, missing).load()
    write_prompts(tmp_path / "prompts", "a.jsonl", [{"prompt": "p"}])
    (tmp_path / "blocker").write_text("a file")
    before = simulator.stats()
    with pytest.raises(
        PySparkException, match=r"Option 'journal' names .* which cannot be written"
    ):
        (
            spark.readStream.format("dspark-json")
            .option("endpoint", simulator.url)
            .option("prompts", str(tmp_path / "prompts"))
            .option("journal", str(tmp_path / "blocker" / "journal"))
            .load()
        )
    after = simulator.stats()
    assert after["requests"] - before["requests"] == 1  # the /stats call itself: nothing else
    assert after.get("chat_completions", 0) == before.get("chat_completions", 0)


def prompts(start: int, n: int) -> list[dict]:
    return [
        {"custom_id": f"r{i:04d}", "prompt": f"Review {i}: fine"} for i in range(start, start + n)
    ]


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


@pytest.mark.slow  # 1,000 prompts through Spark: 40-50 s on the 2-core VM
def test_deep_lines_boms_compressed_and_parquet_files_in_one_query(spark, simulator, tmp_path):
    # 1,000 good prompts, two 100,000-deep lines (the first line of the first file: the schema
    # sample reads it at .load(); and one in the middle of a later file) and a line that is not
    # UTF-8, over every kind of file (one starting with a byte-order mark).
    directory = tmp_path / "prompts"
    directory.mkdir()
    (directory / "0001.jsonl").write_bytes(DEEP.encode() + b"\n" + jsonl(prompts(0, 300)))
    middle = jsonl(prompts(300, 150)) + DEEP.encode() + b"\n" + jsonl(prompts(450, 150))
    (directory / "0002.jsonl.gz").write_bytes(gzip.compress(middle))
    (directory / "0003.jsonl.zst").write_bytes(
        pa.compress(b"\xef\xbb\xbf" + jsonl(prompts(600, 100)), "zstd", asbytes=True)
    )
    (directory / "0004.jsonl.bz2").write_bytes(bz2.compress(jsonl(prompts(700, 100))))
    pq.write_table(pa.Table.from_pylist(prompts(800, 200)), directory / "0005.parquet")
    (directory / "0006.jsonl").write_bytes(b'{"custom_id": "latin1", "prompt": "caf\xe9"}\n')
    before = simulator.stats().get("chat_completions", 0)

    rows = (
        reader(spark, simulator, directory, partitionSize="128")
        .load()
        .select("custom_id", "_status", "_error", "parsed")
        .collect()
    )

    assert len(rows) == 1003
    assert Counter(r["_status"] for r in rows) == {"ok": 1000, "invalid_prompt": 3}
    assert sorted(r["custom_id"] for r in rows if r["_status"] == "ok") == [
        f"r{i:04d}" for i in range(1000)
    ]
    bad = sorted(r["_error"]["message"] for r in rows if r["_status"] == "invalid_prompt")
    assert "0001.jsonl row 1: not usable JSON (nested more than 512 levels deep)" in bad[0]
    assert "0002.jsonl.gz row 151: not usable JSON (nested more than 512" in bad[1]
    assert "0006.jsonl row 1: not valid UTF-8" in bad[2]
    assert simulator.stats()["chat_completions"] - before == 1000


def test_a_prompt_directory_deleted_between_micro_batches_fails_the_query(
    spark, simulator, tmp_path
):
    directory = tmp_path / "prompts"
    write_prompts(directory, "a.jsonl", prompts(0, 3))
    write_prompts(directory, "b.jsonl", prompts(3, 3))
    batches: list[int] = []

    def delete_after_first(frame, batch_id):
        batches.append(frame.count())
        shutil.rmtree(directory)

    query = (
        spark.readStream.format("dspark-json")
        .option("endpoint", simulator.url)
        .option("prompts", str(directory))
        .option("responseFormat", json.dumps(REVIEW_SCHEMA))
        .option("maxFilesPerTrigger", "1")
        .load()
        .writeStream.foreachBatch(delete_after_first)
        .option("checkpointLocation", str(tmp_path / "_checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(PySparkException) as caught:
        query.awaitTermination()
    assert batches == [3]
    text = str(caught.value)
    assert f"The input directory {directory} (option 'prompts" in text
    assert "disappeared while the query was reading it" in text
