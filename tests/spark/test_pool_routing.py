"""Several models and replicas that come and go, end to end: prompt files mixing models ->
Spark stream -> three simulator processes (one serves one model, the replicas of option
endpointsFile serve both; the file changes between micro-batches) -> Delta. Each prompt lands
once, each request goes only to a replica that serves its model, a model nobody serves ends as
model_unavailable with no request, and a replica removed from the file gets no new request."""

import json
import time

import pytest
from deltalake import DeltaTable

import dspark_json
from dspark_json.dev.local import SimulatorProcess
from dspark_json.metrics import METRICS_SCHEMA, read_records, summary
from tests.helpers import REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark


def prompts(start, n, *, gamma=0):
    rows = [
        {"custom_id": f"p{i:03d}", "prompt": f"Question {i}", "model": "beta" if i % 2 else "alpha"}
        for i in range(start, start + n)
    ]
    rows += [
        {"custom_id": f"g{i:03d}", "prompt": f"Lost {i}", "model": "gamma"}
        for i in range(start, start + gamma)
    ]
    return rows


def landed(path, count, timeout=240):
    """The table's rows once it holds ``count`` of them."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        try:
            table = DeltaTable(str(path)).to_pyarrow_table()
        except Exception:  # not created yet
            table = None
        if table is not None and table.num_rows >= count:
            return table.to_pylist()
        time.sleep(0.5)
    raise AssertionError(f"{path} did not reach {count} rows in {timeout}s")


def test_models_route_and_replicas_change_and_every_prompt_lands_once(spark, tmp_path):
    with (
        SimulatorProcess(model="alpha") as a,
        SimulatorProcess(model="alpha,beta") as b,
        SimulatorProcess(model="alpha,beta") as c,
    ):
        listing = tmp_path / "replicas.txt"
        listing.write_text(f"{b.url}\n")
        write_prompts(tmp_path / "in", "a.jsonl", prompts(0, 40, gamma=2))
        reader = (
            spark.readStream.format("dspark-json")
            .option("endpoint", a.url)
            .option("endpointsFile", str(listing))
            .option("endpointRefreshSeconds", "1")
            .option("model", "alpha")
            .option("responseFormat", json.dumps(REVIEW_SCHEMA))  # no sample requests
            .option("prompts", str(tmp_path / "in"))
            .option("requestDeadline", "3")
            .option("partitionSize", "16")
            .option("metrics", str(tmp_path / "metrics"))
        )
        query = dspark_json.write_delta(
            reader.load(),
            str(tmp_path / "table"),
            checkpoint=str(tmp_path / "checkpoint"),
            trigger={"processingTime": "1 second"},
        )
        try:
            first = landed(tmp_path / "table", 42)
            listing.write_text(f"# b is gone\n{c.url}\n")
            at_swap = b.stats()["chat_completions"]
            write_prompts(tmp_path / "in", "b.jsonl", prompts(40, 40))
            rows = landed(tmp_path / "table", 82)
        finally:
            query.stop()
        assert query.exception() is None
        stats = {name: s.stats() for name, s in (("a", a), ("b", b), ("c", c))}
    assert len(first) == 42
    ids = [r["custom_id"] for r in rows]
    assert sorted(ids) == sorted({*ids}) and len(ids) == 82  # each prompt once
    for row in rows:
        if row["custom_id"].startswith("g"):
            assert row["_error"]["type"] == "model_unavailable"
            assert row["_error"]["attempts"] == 0
            assert row["input_model"] == "gamma"
        else:
            assert row["_status"] == "ok", row["_error"]
            assert row["model"] == row["input_model"]  # the answer came from its model
    # Only replicas that serve beta got its requests; nobody was asked for gamma.
    assert stats["a"].get("model:beta", 0) == 0 and stats["a"].get("status_404", 0) == 0
    assert sum(s.get("model:beta", 0) for s in stats.values()) == 40
    assert sum(s["chat_completions"] for s in stats.values()) == 80  # none twice, gamma none
    # The second micro-batch's tasks read the file again: b got nothing new, c took over.
    assert stats["b"]["chat_completions"] == at_swap
    assert stats["c"].get("model:beta", 0) == 20
    # The metrics by model: in the records (read back with METRICS_SCHEMA) and the batch line.
    records = read_records(str(tmp_path / "metrics"))
    by_model = {}
    for record in records:
        for model, figures in (record["models"] or {}).items():
            total = by_model.setdefault(model, dict.fromkeys(figures, 0))
            for part, value in figures.items():
                total[part] = (
                    max(total[part], value or 0)
                    if "latency" in part
                    else total[part] + (value or 0)
                )
    assert {m: (f["rows"], f["requests"]) for m, f in by_model.items()} == {
        "alpha": (40, 40),
        "beta": (40, 40),
        "gamma": (2, 0),
    }
    assert by_model["beta"]["completion_tokens"] > 0 and by_model["beta"]["latency_p95_ms"] > 0
    line = summary(records, "all")
    assert "; by model: alpha 40 rows, 40 requests, tokens " in line
    assert "gamma 2 rows, 0 requests, tokens 0 in / 0 out, no latency measured" in line
    read = spark.read.schema(METRICS_SCHEMA).json(str(tmp_path / "metrics"))
    beta = read.selectExpr("sum(models['beta'].requests) AS n").collect()[0]["n"]
    assert beta == 40


def plain(start, n):
    return [{"custom_id": f"p{i:03d}", "prompt": f"Question {i}"} for i in range(start, start + n)]


def test_an_endpoints_file_alone_follows_replicas_down_to_none_and_back(spark, tmp_path):
    """No option endpoint: the stream follows option endpointsFile as replicas are added and
    removed, down to none (sending pauses, the micro-batch waits) and back; every prompt is
    sent once and lands ok."""
    listing = tmp_path / "replicas.txt"
    with SimulatorProcess(model="alpha") as a, SimulatorProcess(model="alpha") as b:
        listing.write_text(f"{a.url}\n")
        write_prompts(tmp_path / "in", "a.jsonl", plain(0, 20))
        reader = (
            spark.readStream.format("dspark-json")
            .option("endpointsFile", str(listing))
            .option("endpointRefreshSeconds", "1")
            .option("model", "alpha")
            .option("responseFormat", json.dumps(REVIEW_SCHEMA))
            .option("prompts", str(tmp_path / "in"))
            .option("requestDeadline", "300")
            .option("partitionSize", "10")
        )
        query = dspark_json.write_delta(
            reader.load(),
            str(tmp_path / "table"),
            checkpoint=str(tmp_path / "checkpoint"),
            trigger={"processingTime": "1 second"},
        )
        try:
            landed(tmp_path / "table", 20)
            listing.write_text(f"{a.url}\n{b.url}\n")  # scaled up
            write_prompts(tmp_path / "in", "b.jsonl", plain(20, 20))
            landed(tmp_path / "table", 40)
            listing.write_text(f"{b.url}\n")  # scaled down
            write_prompts(tmp_path / "in", "c.jsonl", plain(40, 10))
            landed(tmp_path / "table", 50)
            listing.write_text("# scaled to zero\n")
            time.sleep(2)
            sent = sum(s.stats()["chat_completions"] for s in (a, b))
            a.stop()
            b.stop()
            write_prompts(tmp_path / "in", "d.jsonl", plain(50, 10))
            time.sleep(8)  # the micro-batch waits: no replica
            paused = DeltaTable(str(tmp_path / "table")).to_pyarrow_table().num_rows
            with SimulatorProcess(model="alpha") as c:
                listing.write_text(f"{c.url}\n")  # scaled from zero
                rows = landed(tmp_path / "table", 60)
                from_c = c.stats()["chat_completions"]
        finally:
            query.stop()
        assert query.exception() is None
    assert paused == 50 and sent == 50
    ids = [r["custom_id"] for r in rows]
    assert sorted(ids) == [f"p{i:03d}" for i in range(60)]  # each prompt once
    assert {r["_status"] for r in rows} == {"ok"}, [r["_error"] for r in rows if r["_error"]]
    assert from_c == 10


def test_max_tokens_per_minute_goes_on_across_micro_batches(spark, tmp_path):
    """maxTokensPerMinute=700 and each request counted at ~223 tokens in flight, ~39 once
    answered: a micro-batch of 10 prompts (~390 tokens) fits in a fresh minute. The second
    micro-batch starts with the first's spend (the driver reads it from the metrics records):
    only a few of its requests fit before requestDeadline, the rest end held back; with a fresh
    minute each micro-batch, all 20 were answered."""
    with SimulatorProcess(model="alpha") as a:
        write_prompts(tmp_path / "in", "a.jsonl", plain(0, 10))
        reader = (
            spark.readStream.format("dspark-json")
            .option("endpoint", a.url)
            .option("model", "alpha")
            .option("responseFormat", json.dumps(REVIEW_SCHEMA))
            .option("prompts", str(tmp_path / "in"))
            .option("maxTokens", "32")
            .option("maxTokensPerMinute", "700")
            .option("requestDeadline", "4")
            .option("metrics", str(tmp_path / "metrics"))
        )
        query = dspark_json.write_delta(
            reader.load(),
            str(tmp_path / "table"),
            checkpoint=str(tmp_path / "checkpoint"),
            trigger={"processingTime": "1 second"},
        )
        try:
            landed(tmp_path / "table", 10)
            write_prompts(tmp_path / "in", "b.jsonl", plain(10, 10))
            rows = landed(tmp_path / "table", 20)
        finally:
            query.stop()
        assert query.exception() is None
    first = [r for r in rows if r["custom_id"] < "p010"]
    second = [r for r in rows if r["custom_id"] >= "p010"]
    assert [r["_error"] for r in first] == [None] * 10  # answered (cut at maxTokens: truncated)
    held = [r for r in second if r["_error"] and "maxTokensPerMinute" in r["_error"]["message"]]
    assert 3 <= len(held) <= 9, [r["_error"] for r in second]
