"""Behind a gateway, end to end: Spark, the snippet of docs/guide/gateway.md as written, and
the simulator process answering as LiteLLM's proxy does (its key, its /health that sends
completions, provider_specific_fields in every choice and message, 429s hinted by
llm_provider-retry-after under an rpm limit)."""

import json
from pathlib import Path

import pytest

from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults
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
