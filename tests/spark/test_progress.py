"""Live progress of a real run: prompts on disk -> a simulator that answers slowly -> Spark ->
Delta, read while it runs by ``dspark-json metrics DIR --json`` (a process of its own) and by a
Prometheus scrape of the driver; cost from option ``pricing``."""

import contextlib
import json
import socket
import subprocess
import sys
import time

import httpx
import pytest

import dspark_json
from dspark_json.cli import main
from dspark_json.dev.local import SimulatorProcess
from dspark_json.metrics import read_records
from tests.helpers import REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark

PRICING = {"dspark-sim": {"input": 2.0, "output": 10.0, "cached_input": 1.0}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def progress_json(metrics) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "dspark_json", "metrics", str(metrics), "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


def test_progress_read_mid_run_then_complete_with_cost(spark, tmp_path):
    prompts, metrics = tmp_path / "prompts", tmp_path / "metrics"
    write_prompts(
        prompts,
        "0001.jsonl",
        [{"custom_id": f"r{i:03d}", "prompt": f"Review {i}: fine"} for i in range(80)],
    )
    port = free_port()
    with SimulatorProcess(latency=0.2) as server:
        server.hold(after=30)  # the run waits half-done until the test has read it
        df = (
            spark.readStream.format("dspark-json")
            .option("endpoint", server.url)
            .option("prompts", str(prompts))
            .option("responseFormat", json.dumps(REVIEW_SCHEMA))
            .option("partitionSize", "40")
            .option("maxConcurrency", "4")
            .option("initialConcurrency", "4")
            .option("metrics", str(metrics))
            .option("pricing", json.dumps(PRICING))
            .option("prometheusPort", str(port))
            .load()
        )
        query = dspark_json.write_delta(
            df,
            str(tmp_path / "table"),
            checkpoint=str(tmp_path / "_ckpt"),
            trigger={"availableNow": True},
        )
        seen, scraped = [], None
        deadline = time.monotonic() + 240
        while query.isActive and time.monotonic() < deadline and not (seen and scraped):
            shot = progress_json(metrics)
            if shot["state"] == "running" and 0 < shot["prompts"]["done"] < 80:
                seen.append(shot)
                if scraped is None:
                    with contextlib.suppress(httpx.HTTPError):
                        scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            time.sleep(1.0)
        server.hold(None)
        query.awaitTermination()
        assert query.exception() is None

    assert seen, "no snapshot caught the run half-done"
    middle = seen[0]
    assert middle["version"] == 1
    assert middle["prompts"]["total"] == 80  # availableNow: the whole run, known at planning
    assert middle["requests"] >= middle["prompts"]["done"]
    assert middle["eta_seconds"] is not None and middle["eta_seconds"] > 0
    assert middle["tokens"]["input"] > 0  # counted from the answers while they arrive

    final = progress_json(metrics)
    assert final["state"] == "finished"
    assert final["prompts"] == {"done": 80, "total": 80}
    assert final["ok"] == 80 and final["errors"] == {}
    assert final["tasks"] == {"running": 0, "done": 2}

    records = read_records(str(metrics))
    tokens_in = sum(r["prompt_tokens"] for r in records)
    tokens_out = sum(r["completion_tokens"] for r in records)
    cached = sum(r["cached_tokens"] for r in records)
    expected = ((tokens_in - cached) * 2.0 + cached * 1.0 + tokens_out * 10.0) / 1e6
    assert sum(r["cost_usd"] for r in records) == pytest.approx(expected, rel=1e-6)
    assert final["cost_usd"] == pytest.approx(expected, rel=1e-5)
    assert final["tokens"] == {"input": tokens_in, "output": tokens_out, "cached": cached}

    # The report of the real run: its figures embedded, the rows/s plot has points.
    page = tmp_path / "run.html"
    assert main(["report", str(metrics), "-o", str(page)]) == 0
    embedded = page.read_text().split('id="data">', 1)[1].split("</script>", 1)[0]
    data = json.loads(embedded.replace("<\\/", "</"))
    assert data["series"]["rows_per_second"] and data["latency"]
    assert data["rows"] == {"ok": 80}

    assert scraped is not None, "the Prometheus endpoint did not answer during the run"
    assert "# TYPE dspark_json_prompts_total counter" in scraped
    assert 'dspark_json_tokens_total{kind="input"}' in scraped
    assert "dspark_json_prompts_planned 80" in scraped
