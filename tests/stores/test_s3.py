"""S3 end to end against moto's server: one Spark stream whose prompts, journal, metrics, cache
and Delta table all live on ``s3://``, reached with option ``storageOptions`` only (no
environment variable), run by the snippet of docs/guide/object-stores.md as written; every row ok,
and a second run served from the cache (no request)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from dspark_json import fs
from dspark_json.delta.reader import read_table
from dspark_json.metrics import read_records
from dspark_json.storage import parse_settings
from dspark_json.storage.s3 import STORE as S3_STORE
from tests.helpers import REVIEW_SCHEMA

pytestmark = pytest.mark.spark

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "object-stores.md"
ROWS = 40


def object_stores_snippet() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```\n", start)]


def test_one_stream_on_s3_with_storage_options_only(spark, simulator, s3, tmp_path):
    # The option alone reaches the store: none of S3's variables is set.
    assert not [v for v in S3_STORE.environment if v in os.environ]
    settings = parse_settings(s3.options_json, {})
    lines = "".join(
        json.dumps({"custom_id": f"s{i:03d}", "prompt": f"Review {i}"}) + "\n" for i in range(ROWS)
    )
    fs.write_atomic(f"s3://{s3.bucket}/prompts", "a.jsonl", lines.encode(), storage=settings)
    names = {
        "spark": spark,
        "SERVER": simulator.url,
        "S3_ENDPOINT": s3.endpoint,
        "KEY_ID": s3.options["aws_access_key_id"],
        "SECRET": s3.options["aws_secret_access_key"],
        "BUCKET": s3.bucket,
        "SCHEMA": json.dumps(REVIEW_SCHEMA),
    }

    def run(checkpoint: str) -> int:
        """The snippet once; the chat completions the simulator answered meanwhile."""
        before = simulator.stats().get("chat_completions", 0)
        exec(object_stores_snippet(), {**names, "CHECKPOINT": checkpoint})
        return simulator.stats().get("chat_completions", 0) - before

    assert run(str(tmp_path / "first")) == ROWS
    table = read_table(f"s3://{s3.bucket}/answers", storage_options=s3.options)
    assert sorted(table.column("custom_id").to_pylist()) == [f"s{i:03d}" for i in range(ROWS)]
    assert set(table.column("_status").to_pylist()) == {"ok"}
    records = read_records(f"s3://{s3.bucket}/_metrics", storage=settings)
    assert records and sum(r["rows"].get("ok", 0) for r in records) == ROWS
    fs_, root = fs.resolve(f"s3://{s3.bucket}/_cache", settings)
    entries = [  # one cache entry per answer
        i
        for i in fs_.get_file_info(pafs.FileSelector(root, recursive=True))
        if i.type == pafs.FileType.File
    ]
    assert len(entries) == ROWS

    # Again, a new query (new checkpoint), the journal gone: every answer from the cache.
    fs_.delete_dir_contents(f"{s3.bucket}/_journal", missing_dir_ok=True)
    assert run(str(tmp_path / "second")) == 0
    again = read_table(f"s3://{s3.bucket}/answers", storage_options=s3.options)
    assert again.num_rows == 2 * ROWS and set(again.column("_status").to_pylist()) == {"ok"}
