"""Through Spark Connect: a client registers the formats with a Connect server started here, reads
prompts as a batch, streams them into Delta with the dspark-delta sink, writes a batch into Delta.
The client runs in its own process (tests/spark/deploy_job.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from dspark_json.dev.cluster import ConnectServer
from dspark_json.dev.local import SimulatorProcess
from tests.helpers import write_prompts

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).parent / "deploy_job.py"


def test_register_read_and_stream_into_delta_through_spark_connect(tmp_path):
    rows = [{"custom_id": f"k{i:02d}", "prompt": f"Question {i}"} for i in range(40)]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    with (
        SimulatorProcess(seed=4) as server,
        ConnectServer(tmp_path / "spark", master="local[2]") as connect,
    ):
        done = subprocess.run(
            [
                sys.executable,
                str(JOB),
                "connect",
                "--remote",
                connect.url,
                "--url",
                server.url,
                "--work",
                str(tmp_path),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=600,
        )
        stats = server.stats()
    assert done.returncode == 0, done.stderr[-5000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    ids = [r["custom_id"] for r in rows]
    assert sorted(r["custom_id"] for r in summary["batch_rows"]) == ids
    assert {r["_status"] for r in summary["batch_rows"]} == {"ok"}
    assert [p["numInputRows"] for p in summary["stream"]] == [20, 20]
    table = DeltaTable(str(tmp_path / "table"))
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table().column("custom_id").to_pylist()) == ids
    assert stats["chat_completions"] == 80  # the batch read, then the stream
    batch = DeltaTable(str(tmp_path / "batch-table")).to_pyarrow_table()
    assert sorted(batch.to_pylist(), key=lambda r: r["n"]) == [
        {"n": 1, "s": "a"},
        {"n": 2, "s": "b"},
    ]
