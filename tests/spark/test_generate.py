"""The client against the simulator process with faults on, through real Spark and Delta."""

import json
import logging
from collections import Counter

import pytest
from deltalake import DeltaTable

import dspark_json
from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults
from dspark_json.metrics import METRICS_SCHEMA
from tests.helpers import CANARY, REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark

FAULTS = Faults(
    error_rates={503: 0.12, 429: 0.1, 400: 0.03},
    error_shape="flat",
    retry_after_ms=20,
    reset_rate=0.03,
    truncate_rate=0.03,
    malformed_rate=0.05,
    api_key=CANARY,
)


def prompts(start, n):
    return [{"custom_id": f"r{i:04d}", "prompt": f"Review {i}"} for i in range(start, start + n)]


def reader(spark, url, prompt_dir, **options):
    r = (
        spark.readStream.format("dspark-json")
        .option("endpoint", url)
        .option("prompts", str(prompt_dir))
        .option("responseFormat", json.dumps(REVIEW_SCHEMA))
        .option("partitionSize", "32")
    )
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def test_with_faults_every_prompt_lands_once_and_failures_carry_error(spark, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(0, 60))
    write_prompts(tmp_path / "in", "b.jsonl", prompts(60, 60))
    with SimulatorProcess(seed=11, faults=FAULTS) as server:
        df = reader(
            spark,
            server.url,
            tmp_path / "in",
            apiKeyEnv="DSPARK_TEST_API_KEY",
            metrics=str(tmp_path / "metrics"),
        )
        query = dspark_json.write_delta(
            df, str(tmp_path / "t"), checkpoint=str(tmp_path / "c"), trigger={"availableNow": True}
        )
        query.awaitTermination()
        stats = server.stats()
    rows = DeltaTable(str(tmp_path / "t")).to_pyarrow_table().to_pylist()
    assert sorted(r["custom_id"] for r in rows) == [f"r{i:04d}" for i in range(120)]
    by_status = {}
    for row in rows:
        by_status.setdefault(row["_status"], []).append(row)
    # 503, 429, resets and cut bodies were retried away; only the 400s (not retried) remain.
    assert stats["status_503"] > 0 and stats["status_429"] > 0
    assert stats["reset"] > 0 and stats["truncate"] > 0
    failed = by_status["http_error"]
    assert 0 < len(failed) < 12
    for row in failed:  # a 400 ends the prompt at once, whatever came before it
        error = row["_error"]
        assert (error["status"], error["type"]) == (400, "BadRequestError")
        assert error["message"] == "Injected fault: HTTP 400" and 1 <= error["attempts"] <= 5
        assert row["id"] is None and row["parsed"] is None
    assert len(failed) == stats["status_400"]
    # Malformed (cut at max_tokens) answers arrive as rows the parser flags, finish_reason kept.
    cut = [r for r in rows if r["choices"] and r["choices"][0]["finish_reason"] == "length"]
    assert cut and all(r["_status"] in ("truncated", "corrupt_content") for r in cut)
    assert all(r["parsed"] is not None for r in by_status["ok"])
    assert stats["status_200"] == len(rows) - len(failed)  # no prompt answered twice
    assert CANARY not in json.dumps(rows, default=str)
    # The metrics records add up to what the server saw, one record per partition.
    metrics = [
        r.asDict(recursive=True)
        for r in spark.read.schema(METRICS_SCHEMA).json(str(tmp_path / "metrics")).collect()
    ]
    assert len(metrics) == 4  # 120 prompts, 32 per partition
    assert sum(m["prompts"] for m in metrics) == 120
    assert sum(m["requests"] for m in metrics) == stats["chat_completions"]
    assert sum(m["retries"] for m in metrics) == stats["chat_completions"] - 120
    codes = Counter()
    for m in metrics:
        codes.update({k: v for k, v in m["http_status"].items() if v})
    assert codes["503"] == stats["status_503"] and codes["RemoteProtocolError"] > 0
    assert sum(m["error_rows"] for m in metrics) == len(failed)
    assert sum(m["rows"].get("ok") or 0 for m in metrics) == len(by_status["ok"])
    assert all(m["latency_ms"]["p95"] > 0 and m["backend"] == "cpu" for m in metrics)
    assert all(m["source"] == "server" and m["batch"] == 0 and m["offset"] for m in metrics)
    assert sum(m["completion_tokens"] for m in metrics) == sum(
        r["usage"]["completion_tokens"] for r in rows if r["usage"]
    )


def test_the_key_is_nowhere_it_must_not_be(spark, tmp_path, capsys, caplog):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(0, 3))
    faults = Faults(api_key=CANARY, error_rates={400: 1.0})
    for name in ("dspark_json", "httpx", "httpcore"):
        caplog.set_level(logging.DEBUG, logger=name)
    with SimulatorProcess(faults=faults) as server:
        url = server.url.replace("http://", f"http://ann:{CANARY}@")
        df = reader(
            spark,
            url,
            tmp_path / "in",
            apiKey=CANARY,
            mode="FAILFAST",
            maxConcurrency="1",
            journal=str(tmp_path / "journal"),
        )
        df.explain(True)
        query = df.writeStream.format("memory").queryName("keyless").start()
        with pytest.raises(Exception) as failure:
            query.processAllAvailable()
        progress = json.dumps([p.json for p in query.recentProgress])
    explained = capsys.readouterr().out
    assert "StreamingRelationV2" in explained and "apiKey=*********(redacted)" in explained
    message = str(failure.value)
    assert "mode=FAILFAST: the request for custom_id 'r000" in message
    assert "HTTP 400, BadRequestError: Injected fault: HTTP 400" in message
    for text in (explained, message, progress, caplog.text, repr(df)):
        assert CANARY not in text
    # FAILFAST stopped after the first failure: that partial fetch is not journaled (a restart
    # in PERMISSIVE mode must send the prompts that were never sent).
    assert not list((tmp_path / "journal").glob("*.arrow"))


def test_load_checks_name_the_url_the_cause_and_the_option(spark, tmp_path):
    with pytest.raises(
        Exception,
        match=r"Cannot reach the model server at http://127\.0\.0\.1:9/"
        r"v1/models \(ConnectError.*option 'endpoint'",
    ):
        reader(spark, "http://127.0.0.1:9", tmp_path)
    with SimulatorProcess(faults=Faults(api_key=CANARY)) as server:
        with pytest.raises(
            Exception, match=r"HTTP 401: it needs an API key\. Set option 'apiKeyEnv'"
        ):
            reader(spark, server.url, tmp_path)
        with pytest.raises(Exception, match=r"HTTP 401: the API key given was refused") as bad:
            reader(spark, server.url, tmp_path, apiKey="zq-wrong-key-1")
        assert "zq-wrong-key-1" not in str(bad.value)


def test_a_dead_endpoint_among_two_costs_no_row(spark, simulator, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(0, 40))
    df = reader(spark, f"http://127.0.0.1:9,{simulator.url}", tmp_path / "in")
    rows = df.writeStream.format("memory").queryName("two_endpoints").trigger(availableNow=True)
    query = rows.start()
    query.awaitTermination()
    got = spark.sql("select custom_id, _status from two_endpoints").collect()
    assert sorted(r.custom_id for r in got) == [f"r{i:04d}" for i in range(40)]
    assert {r._status for r in got} == {"ok"}


def test_generate_answers_a_dataframe_column(spark, simulator, tmp_path):
    df = spark.createDataFrame(
        [("a", "Review: great kettle", 1), ("b", None, 2), ("c", "Review: noisy", 3)],
        "custom_id string, question string, n int",
    )
    out = dspark_json.generate(
        df,
        "question",
        endpoint=simulator.url,
        response_format=REVIEW_SCHEMA,
        max_concurrency=4,
        adaptive_concurrency=False,
        metrics=str(tmp_path / "metrics"),
    )
    assert out.columns[:4] == ["custom_id", "question", "n", "id"]
    got = {r.custom_id: r for r in out.collect()}
    assert got["a"]._status == "ok" and got["a"].parsed.sentiment in (
        "positive",
        "neutral",
        "negative",
    )
    assert got["b"]._status == "invalid_prompt" and got["b"]._error.type == "invalid_prompt"
    records = [json.loads(p.read_text()) for p in (tmp_path / "metrics").glob("*.json")]
    assert sum(r["prompts"] for r in records) == 3 and sum(r["requests"] for r in records) == 2
    assert all(r["label"].startswith("generate stage ") and r["batch"] is None for r in records)
    with pytest.raises(dspark_json.OptionError, match="column 'prompt' is not a column"):
        dspark_json.generate(df, endpoint=simulator.url)
    with pytest.raises(dspark_json.OptionError, match="Option 'prompts' does not apply here"):
        dspark_json.generate(df, "question", endpoint=simulator.url, prompts="/x")


def test_generate_applies_schema_hints_as_the_source_does(spark, simulator):
    """``schema_hints`` used to be accepted and never applied: ``stars`` (an integer in the JSON
    Schema) stayed bigint."""
    df = spark.createDataFrame([("a", "Review: great kettle")], "custom_id string, question string")
    out = dspark_json.generate(
        df,
        "question",
        endpoint=simulator.url,
        response_format=REVIEW_SCHEMA,
        schema_hints="parsed.stars STRING, parsed.reviewed_on DATE",
    )
    parsed = out.schema["parsed"].dataType
    assert parsed["stars"].dataType.simpleString() == "string"
    assert parsed["reviewed_on"].dataType.simpleString() == "date"
    (row,) = out.collect()
    assert row._status == "ok" and row.parsed.stars in {"1", "2", "3", "4", "5"}
