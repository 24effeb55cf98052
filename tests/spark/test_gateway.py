"""Behind a gateway, end to end: Spark, the snippet of docs/guide/gateway.md as written, and
the simulator process answering as LiteLLM's proxy does (its key, its /health that sends
completions, provider_specific_fields in every choice and message, 429s hinted by
llm_provider-retry-after under an rpm limit)."""

import json
import time
from pathlib import Path

import pytest

from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults
from dspark_json.metrics import read_records, summary
from tests.helpers import CANARY, REVIEW_SCHEMA, write_prompts

pytestmark = pytest.mark.spark

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "gateway.md"
ROWS = 60
#: 60 prompts at 10 completions a second: the last wait 5 windows or more, each a 429, more
#: than the default maxAttempts (5) would allow.
RATE = {"rpm": 10, "rate_window": 1.0}


def gateway_snippet() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```\n", start)]


def prompts(n: int) -> list[dict[str, str]]:
    return [{"custom_id": f"g{i:03d}", "prompt": f"Review {i}"} for i in range(n)]


def test_through_litellm_under_a_rate_limit_every_row_lands_ok_with_default_options(
    spark, tmp_path
):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(ROWS))
    faults = Faults(gateway="litellm", api_key=CANARY, **RATE)
    with SimulatorProcess(seed=5, faults=faults) as server:
        names = {
            "spark": spark,
            "GATEWAY": server.url,
            "PROMPTS": str(tmp_path / "in"),
            "SCHEMA": json.dumps(REVIEW_SCHEMA),
        }
        exec(gateway_snippet(), names)  # the page's snippet, as written
        df = names["reader"].load()
        at_load = server.stats()
        query = (
            df.writeStream.format("memory")
            .queryName("through_litellm")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        stats = server.stats()
    rows = spark.sql("select * from through_litellm").collect()
    assert at_load.get("health_completions", 0) == 0 and at_load.get("chat_completions", 0) == 0
    assert sorted(r.custom_id for r in rows) == [f"g{i:03d}" for i in range(ROWS)]
    assert {r._status for r in rows} == {"ok"}, [r._error for r in rows if r._error]
    assert all(r.parsed.sentiment is not None for r in rows)
    assert stats["rate_limited"] >= ROWS  # the limit was hit, and waited out
    # The gateway's fields are typed (their null values rescue nothing): nothing is drift.
    assert {r._rescued_data for r in rows} == {None}


def test_load_through_litellm_asks_for_the_key_or_names_health_path(spark, tmp_path):
    write_prompts(tmp_path / "in", "a.jsonl", prompts(2))
    with SimulatorProcess(faults=Faults(gateway="litellm", api_key=CANARY)) as server:

        def load(**options: str) -> None:
            reader = (
                spark.read.format("dspark-json")
                .option("endpoint", server.url)
                .option("prompts", str(tmp_path / "in"))
            )
            for key, value in options.items():
                reader = reader.option(key, value)
            reader.load()

        with pytest.raises(Exception) as no_key:
            load()  # LiteLLM's /v1/models answers 401 without a key
        with pytest.raises(Exception) as no_key_at_health:
            load(healthPath="/health")  # its /health answers 500 without a key
        with pytest.raises(Exception) as wrong_key:
            load(apiKey="zq-wrong-key-1")  # 400 "No connected db"
        load(apiKeyEnv="LITELLM_API_KEY")
        by_default = server.stats().get("health_completions", 0)
        load(apiKeyEnv="LITELLM_API_KEY", healthPath="/health")
        asked = server.stats().get("health_completions", 0)
    assert f"{server.url}/v1/models answered HTTP 401" in str(no_key.value)
    assert "it needs an API key. Set option 'apiKeyEnv'" in str(no_key.value)
    assert f"{server.url}/health answered HTTP 500" in str(no_key_at_health.value)
    assert "it needs an API key" in str(no_key_at_health.value)
    assert f"{server.url}/v1/models answered HTTP 400" in str(wrong_key.value)
    assert "the API key given was refused" in str(wrong_key.value)
    assert "zq-wrong-key-1" not in str(wrong_key.value)
    # The default healthPath (auto) asks no /health of a server whose models are not vLLM's;
    # asked for, LiteLLM's /health sends a completion to every deployment.
    assert (by_default, asked) == (0, 1)


def test_behind_llm_d_a_sheddable_stream_lands_every_row_ok_with_shed_requests_counted(
    spark, tmp_path
):
    """llm-d's gateway sheds the stream's requests (its objective is sheddable) while the pool
    is saturated, and answers 503 while the pool has scaled to zero: each shed request waits
    and is sent again, every row lands ok, the shed ones counted in the metrics records."""
    rows = 40
    write_prompts(tmp_path / "in", "a.jsonl", prompts(rows))
    faults = Faults(gateway="llm-d", objectives={"batch": -1}, capacity=2)
    with SimulatorProcess(seed=7, latency=0.05, faults=faults) as server:
        df = (
            spark.readStream.format("dspark-json")
            .option("endpoint", server.url)
            .option("prompts", str(tmp_path / "in"))
            .option("responseFormat", json.dumps(REVIEW_SCHEMA))
            .option("requestHeaders", '{"x-llm-d-inference-objective": "batch"}')
            .option("maxConcurrency", "8")
            .option("maxAttempts", "2")
            .option("metrics", str(tmp_path / "metrics"))
            .load()
        )
        server.set_backend(False)  # scaled to zero after .load()'s checks
        query = (
            df.writeStream.format("memory").queryName("behind_llm_d").trigger(availableNow=True)
        ).start()
        until = time.monotonic() + 120
        while not server.stats().get("no_backend") and time.monotonic() < until:
            time.sleep(0.2)  # the stream's first requests meet a pool with no endpoint
        time.sleep(1)
        server.set_backend(True)
        query.awaitTermination()
        stats = server.stats()
    landed = spark.sql("select * from behind_llm_d").collect()
    assert sorted(r.custom_id for r in landed) == [f"g{i:03d}" for i in range(rows)]
    assert {r._status for r in landed} == {"ok"}, [r._error for r in landed if r._error]
    records = read_records(str(tmp_path / "metrics"))
    counted = sum(r["shed"] for r in records)
    assert stats["shed"] > 0 and stats["no_backend"] > 0
    assert counted == stats["shed"] + stats["no_backend"]
    assert f"({counted} shed)" in summary(records, "run")
