"""Re-asks (option repairAttempts) end to end: real Spark, the simulator process with a fifth of
first answers broken in ways a re-ask fixes, a real Delta table; and a kill -9 mid-batch, after
which the restart re-asks nothing it already had the answer to."""

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from dspark_json.compat import start
from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults
from tests.helpers import write_prompts
from tests.raw_servers import alive, completion, raw_server, response
from tests.spark.test_exactly_once import SCHEMA, finish, job, prompts, rows

pytestmark = pytest.mark.spark

#: A fifth of first answers broken, a twentieth each way.
BROKEN = Faults(
    first_truncated_rate=0.05,
    first_broken_rate=0.05,
    first_prose_rate=0.05,
    first_invalid_rate=0.05,
)


def metrics(directory: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def reasks_in(table_rows) -> int:
    return sum(len(r["_attempts"]) - 1 for r in table_rows if r["_attempts"])


def test_a_fifth_of_broken_first_answers_are_fixed_into_delta(spark, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(0, 100))
    with SimulatorProcess(seed=11, faults=BROKEN) as server:
        df = (
            spark.readStream.format("dspark-json")
            .option("endpoint", server.url)
            .option("prompts", str(tmp_path / "in"))
            .option("responseFormat", json.dumps(SCHEMA))
            .option("validateSchema", "true")
            .option("maxTokens", "32")
            .option("repairAttempts", "2")
            .option("maxRecordsPerTrigger", "50")
            .option("partitionSize", "25")
            .option("metrics", str(tmp_path / "metrics"))
            .load()
        )
        writer = df.writeStream.format("dspark-delta").option(
            "checkpointLocation", str(tmp_path / "checkpoint")
        )
        query = start(writer, {"availableNow": True}, path=str(tmp_path / "table"))
        query.awaitTermination()
        assert query.exception() is None
        stats = server.stats()
    got = DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pylist()
    ids = [r["custom_id"] for r in got]
    assert sorted(ids) == [f"q{i:03d}" for i in range(100)]  # every prompt once
    broken = sum(
        stats.get(f"first_{kind}", 0) for kind in ("truncated", "broken", "prose", "invalid")
    )
    assert 10 <= broken <= 30  # about a fifth were broken the first time
    ok = [r for r in got if r["_status"] == "ok" and not r["_schema_violations"]]
    assert len(ok) >= 99
    tried = [r for r in got if r["_attempts"]]
    assert len(tried) == broken  # every row re-asked shows it, and only those
    for r in tried:
        first, *_, last = r["_attempts"]
        assert first["status"] != "ok" or first["reason"].endswith("re-asked with the error named")
        assert first["reason"] is not None and last["status"] == r["_status"]
        assert all(a["completion_tokens"] for a in r["_attempts"])
    truncated = [r for r in tried if r["_attempts"][0]["status"] == "truncated"]
    assert truncated and all("max_tokens=64" in r["_attempts"][0]["reason"] for r in truncated)
    records = metrics(tmp_path / "metrics")
    assert sum(m["repair"]["reasks"] for m in records) == reasks_in(got) == stats["reasks"]
    assert sum(m["repair"]["fixed"] for m in records) == len(tried)
    assert sum(m["repair"]["completion_tokens"] for m in records) == sum(
        a["completion_tokens"] for r in tried for a in r["_attempts"][1:]
    )
    assert stats["chat_completions"] == 100 + stats["reasks"]
    # The records' own tokens are the first answers', though the rows hold the last ones.
    first = sum(
        r["_attempts"][0]["prompt_tokens"] if r["_attempts"] else r["usage"]["prompt_tokens"]
        for r in got
    )
    assert sum(m["prompt_tokens"] for m in records) == first


@pytest.mark.slow
def test_kill_9_mid_batch_then_a_restart_re_asks_nothing_already_answered(tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(0, 30))
    write_prompts(tmp_path / "in", "b.jsonl", prompts(30, 30))  # 3 batches of 20
    faults = Faults(vary=True, **{k: v for k, v in vars(BROKEN).items() if k.startswith("first_")})
    with SimulatorProcess(seed=7, faults=faults) as server:
        # Killed after batch 1's tasks asked, re-asked, journaled and wrote their files, before
        # its Delta commit.
        code, err = finish(
            job(
                server.url,
                tmp_path,
                "--repair-attempts",
                "2",
                "--crash",
                "after-journal",
                "--crash-batch",
                "1",
            )
        )
        assert code == -9, err[-3000:]  # finish() waited until its JVM and workers were gone
        before = server.stats()
        assert before["reasks"] > 0
        assert DeltaTable(str(tmp_path / "table")).version() == 0  # batch 0 only
        batch_1 = {p.name for p in (tmp_path / "journal").glob("*.repair-*.arrow")}
        assert batch_1  # its re-asks are journaled
        # The restart replays batch 1 from the journal, re-asks included, and asks batch 2.
        code, err = finish(job(server.url, tmp_path, "--repair-attempts", "2"))
        assert code == 0, err[-3000:]
        after = server.stats()
    got, count = rows(tmp_path)
    assert count == 60 and sorted(got) == [f"q{i:03d}" for i in range(60)]
    assert all(r["_status"] == "ok" and not r["_schema_violations"] for r in got.values())
    batch_2 = [got[f"q{i:03d}"] for i in range(40, 60)]
    batch_1_rows = [got[f"q{i:03d}"] for i in range(20, 40)]
    assert reasks_in(batch_1_rows) > 0 and reasks_in(batch_2) > 0
    # Sent after the restart: batch 2's prompts and re-asks, nothing of batch 1.
    assert after["reasks"] - before["reasks"] == reasks_in(batch_2)
    assert after["chat_completions"] - before["chat_completions"] == 20 + reasks_in(batch_2)
    assert after.get("repeated", 0) == before.get("repeated", 0)
    # The replay's metrics say where batch 1's re-asks came from.
    replayed = [m for m in metrics(tmp_path / "metrics") if m["source"] == "journal"]
    assert sum(m["repair"]["from_journal"] for m in replayed) == reasks_in(batch_1_rows)
    assert all(m["repair"]["from_journal"] == m["repair"]["reasks"] for m in replayed)


def test_generate_takes_repair_attempts_by_its_snake_case_name(spark):
    import dspark_json

    df = spark.createDataFrame(
        [(f"q{i:03d}", f"Question {i}") for i in range(40)], "custom_id string, prompt string"
    )
    with SimulatorProcess(seed=11, faults=BROKEN) as server:
        out = dspark_json.generate(
            df,
            endpoint=server.url,
            response_format=SCHEMA,
            validate_schema=True,
            max_tokens=32,
            repair_attempts=2,
        ).collect()
        stats = server.stats()
    assert len(out) == 40 and stats["reasks"] > 0
    assert all(r["_status"] == "ok" and not r["_schema_violations"] for r in out)
    assert sum(len(r["_attempts"]) - 1 for r in out if r["_attempts"]) == stats["reasks"]


def _cut_without_usage(request):
    """A hostile server: /health and /v1/models up; every completion cut at max_tokens
    (``{"word": "amb``, finish_reason length) and without ``usage``."""
    if request.path != "/v1/chat/completions":
        return alive(request)
    body = completion('{"word": "amb')
    body["choices"][0]["finish_reason"] = "length"
    del body["usage"]
    return response(200, body)


@pytest.mark.parametrize(("budget", "sent"), [("1", 1), ("100000", 1 + 3)])
def test_identical_rows_without_usage_re_ask_once_within_the_budget(spark, tmp_path, budget, sent):
    """Four identical prompts (temperature 0) whose answers are always cut and report no usage,
    repairAttempts=3. A budget of 1 stops every re-ask (before: 12 re-asks, "0 of a budget of
    1"); a large one sends one re-ask a round, shared by the four rows (before: 4 a round), and
    the metrics say the tokens were estimated."""
    write_prompts(
        tmp_path / "in",
        "a.jsonl",
        [{"custom_id": f"q{i}", "prompt": "The same question"} for i in range(4)],
    )
    with raw_server(_cut_without_usage) as server:
        got = (
            spark.read.format("dspark-json")
            .option("endpoint", server.url)
            .option("prompts", str(tmp_path / "in"))
            .option("responseFormat", json.dumps(SCHEMA))
            .option("temperature", "0")
            .option("maxTokens", "32")
            .option("repairAttempts", "3")
            .option("repairTokenBudget", budget)
            .option("metrics", str(tmp_path / "metrics"))
            .load()
            .collect()
        )
        asked = [r for r in server.requests if r.path == "/v1/chat/completions"]
    assert len(asked) == sent
    assert sorted(r["custom_id"] for r in got) == ["q0", "q1", "q2", "q3"]
    assert all(r["_status"] == "truncated" for r in got)
    (repair,) = [m["repair"] for m in metrics(tmp_path / "metrics")]
    if budget == "1":
        assert repair["reasks"] == 0 and repair["over_budget"] == 4
        assert all("repairTokenBudget is spent" in r["_attempts"][0]["reason"] for r in got)
    else:
        assert repair["reasks"] == 12 and repair["requests"] == 3
        assert all(len(r["_attempts"]) == 4 for r in got)  # each row lists its answers
        assert repair["spent_tokens"] == repair["estimated_tokens"] > 0
        assert repair["prompt_tokens"] == repair["completion_tokens"] == 0  # none reported
