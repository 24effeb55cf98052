"""On a Spark standalone cluster started here (Master and Worker on 127.0.0.1, executors in
JVMs of their own), with ``spark.driver.maxResultSize=1m``: prompts -> dspark-json -> the
dspark-delta sink, the executors writing the data files. One run of tests/spark/deploy_job.py;
the tests read what it left."""

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from deltalake import DeltaTable

from dspark_json.dev.cluster import StandaloneCluster
from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults
from tests.helpers import CANARY, write_prompts

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).parent / "deploy_job.py"
KEY_ENV = "DSPARK_TEST_API_KEY"


@dataclass
class Run:
    work: Path
    summary: dict
    stats: dict
    executor_logs: list[Path]


def prompts(start, n):
    """Prompts with a 2 KB pass-through field each (hex of a hash chain: not compressible to
    nothing), so that 3,000 of them make a micro-batch of several MB."""
    rows = []
    for i in range(start, start + n):
        seed = hashlib.sha256(str(i).encode()).hexdigest()
        note = "".join(hashlib.sha256(f"{seed}{k}".encode()).hexdigest() for k in range(32))
        rows.append({"custom_id": f"c{i:05d}", "prompt": f"Question {i}", "note": note})
    return rows


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    work = tmp_path_factory.mktemp("cluster")
    write_prompts(work / "in", "a.jsonl", prompts(0, 3000))  # batch 0: ~6 MB of pass-through
    write_prompts(work / "in", "b.jsonl", prompts(3000, 1000))  # batch 1
    with (
        SimulatorProcess(seed=3, faults=Faults(api_key=CANARY)) as server,
        # The daemons, and so the executors, do not inherit the key from this process: it can
        # reach them only through spark.executorEnv.
        StandaloneCluster(work / "spark", cores=2, memory="2g", drop_env=[KEY_ENV]) as cluster,
    ):
        done = subprocess.run(
            [
                sys.executable,
                str(JOB),
                "cluster",
                "--master",
                cluster.url,
                "--url",
                server.url,
                "--work",
                str(work),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=780,
        )
        stats = server.stats()
        logs = cluster.executor_logs()
    assert done.returncode == 0, done.stderr[-5000:]
    return Run(work, json.loads(done.stdout.strip().splitlines()[-1]), stats, logs)


def test_stream_on_a_cluster_lands_each_prompt_once_with_the_key_on_the_executors(run):
    assert run.summary["executors"] == 2
    assert len(run.executor_logs) == 2  # two executor JVMs, started by the Worker
    delta = DeltaTable(str(run.work / "table"))
    table = delta.to_pyarrow_table()
    ids = table.column("custom_id").to_pylist()
    assert len(ids) == 4000 and len(set(ids)) == 4000
    # Each request carried the key (the server refuses any without it), which the executors had
    # only from spark.executorEnv, and was sent once.
    assert set(table.column("_status").to_pylist()) == {"ok"}
    assert run.stats["chat_completions"] == 4000 and run.stats.get("repeated", 0) == 0
    assert table.column("note").to_pylist()[0] is not None
    # Every data file on disk is in the log: written by the tasks, committed by the driver.
    root = run.work / "table"
    assert {p.name for p in root.glob("*.parquet")} == {Path(u).name for u in delta.file_uris()}


def test_a_multi_megabyte_batch_passes_driver_max_result_size_of_1m(run):
    first = {p["batchId"]: p["numInputRows"] for p in run.summary["first"]}
    assert first == {0: 3000, 1: 1000}
    # The control: the same rows collected to the driver, as foreachBatch's toArrow() does.
    assert "is bigger than spark.driver.maxResultSize (1024.0 KiB)" in run.summary["control_error"]
    history = DeltaTable(str(run.work / "table")).history()
    batch_0 = next(h for h in history if h["version"] == 0)
    assert batch_0["operation"] == "CREATE TABLE"


def test_a_replayed_batch_on_the_cluster_commits_nothing_and_asks_nothing(run):
    assert run.summary["replay"] == [{"batchId": 1, "numInputRows": 1000}]
    delta = DeltaTable(str(run.work / "table"))
    assert delta.version() == 1  # batches 0 and 1, once each
    assert delta.to_pyarrow_table().num_rows == 4000
