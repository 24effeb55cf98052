"""A compressed prompt file through a real streaming query (Spark local, the simulator, Delta on
disk): its rows of each micro-batch go to one task as parts, every row once, in order, each part
journaled and reported under its own number."""

from __future__ import annotations

import gzip
import json

import pytest
from deltalake import DeltaTable

import dspark_json
from dspark_json.metrics import read_records
from tests.helpers import REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark


def test_a_gz_file_streams_every_row_once_in_parts(spark, simulator, tmp_path):
    prompt_dir, table = tmp_path / "prompts", tmp_path / "table"
    metrics, journal = tmp_path / "_metrics", tmp_path / "_journal"
    write_prompts(prompt_dir, "a.jsonl", [{"custom_id": f"a{i}", "prompt": "x"} for i in range(5)])
    lines = "".join(
        json.dumps({"custom_id": f"b{i:03d}", "prompt": f"p{i}"}) + "\n" for i in range(70)
    )
    (prompt_dir / "b.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    reader = (
        spark.readStream.format("dspark-json")
        .option("endpoint", simulator.url)
        .option("prompts", str(prompt_dir))
        .option("responseFormat", json.dumps(REVIEW_SCHEMA))
        .option("partitionSize", "16")
        .option("maxRecordsPerTrigger", "45")
        .option("metrics", str(metrics))
        .option("journal", str(journal))
    )
    query = dspark_json.write_delta(
        reader.load(),
        str(table),
        checkpoint=str(tmp_path / "_ckpt"),
        trigger={"availableNow": True},
    )
    query.awaitTermination()
    assert query.exception() is None
    done = DeltaTable(str(table)).to_pyarrow_table()
    ids = done.column("custom_id").to_pylist()
    assert sorted(ids) == sorted([f"a{i}" for i in range(5)] + [f"b{i:03d}" for i in range(70)])
    assert set(done.column("_status").to_pylist()) == {"ok"}
    # Batch 1: a's 5 rows, b's rows 0-39 (parts 0-15, 16-31, 32-39); batch 2: b's 40-69.
    records = read_records(str(metrics))  # the partitions' records (not _progress/)
    assert sorted(r["prompts"] for r in records) == sorted([5, 16, 16, 8, 16, 14])
    assert len({(r["batch"], r["partition"]) for r in records}) == len(records)
