import json

import httpx
import jsonschema
import pytest
from conftest import REVIEW_SCHEMA


def chat(url, messages, **extra):
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "dspark-sim", "messages": messages, **extra},
        timeout=10,
    )


def test_health_and_models(simulator):
    assert httpx.get(f"{simulator.url}/health").status_code == 200
    models = httpx.get(f"{simulator.url}/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["dspark-sim"]


def test_structured_output_conforms_and_is_deterministic(simulator):
    rf = {"type": "json_schema", "json_schema": {"name": "review", "schema": REVIEW_SCHEMA}}
    messages = [{"role": "user", "content": "Review: fine kettle"}]
    first = chat(simulator.url, messages, response_format=rf).json()
    second = chat(simulator.url, messages, response_format=rf).json()
    content = first["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(content), REVIEW_SCHEMA)
    assert content == second["choices"][0]["message"]["content"]
    assert first["object"] == "chat.completion" and first["model"] == "dspark-sim"
    assert set(first["usage"]) >= {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert first["choices"][0]["finish_reason"] == "stop"


def test_n_choices_and_prose_without_schema(simulator):
    out = chat(simulator.url, [{"role": "user", "content": "hi"}], n=3).json()
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    assert out["choices"][0]["message"]["content"].startswith("Here is my answer")


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        ({"model": "other", "messages": []}, 404, "The model `other` does not exist."),
        ({"model": "dspark-sim"}, 400, "Field 'messages' is required."),
    ],
)
def test_errors_use_vllm_error_shape(simulator, payload, status, message):
    response = httpx.post(f"{simulator.url}/v1/chat/completions", json=payload)
    assert response.status_code == status
    assert response.json()["error"]["message"] == message


def test_stats_count_completions(simulator):
    before = simulator.stats().get("chat_completions", 0)
    chat(simulator.url, [{"role": "user", "content": "count me"}])
    assert simulator.stats()["chat_completions"] == before + 1
