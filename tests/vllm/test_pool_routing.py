"""Routing by model against real vLLM (the tier's CPU build): the model lists the client
routes by are vLLM's own ``/v1/models``, and the requests it does not send are counted by
vLLM's own ``/metrics`` (``http_requests_total`` of ``/v1/chat/completions``)."""

from __future__ import annotations

import re

import httpx
import pytest

from dspark_json.dev.local import SimulatorProcess
from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions

pytestmark = [pytest.mark.vllm]

_COMPLETIONS = re.compile(
    r'^http_requests_total\{[^}]*handler="/v1/chat/completions"[^}]*\} ([0-9.e+]+)$', re.M
)


def completions_seen(url: str) -> float:
    """The chat completion requests vLLM has answered (any status), from its /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = _COMPLETIONS.findall(text)
    return sum(float(value) for value in found)


def body(model: str, i: int) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": f"Say {i}"}],
        "max_tokens": 2,
    }


def test_requests_go_by_vllm_s_model_list_and_a_model_nobody_serves_is_never_sent(vllm):
    with SimulatorProcess(model="beta") as simulator:
        options = HttpOptions(
            endpoints=(Endpoint(vllm.url), Endpoint(simulator.url)),
            request_deadline=3.0,
            request_timeout=120.0,
        )
        before = completions_seen(vllm.url)
        requests = [body(m, i) for i, m in enumerate([vllm.model, "beta", "ghost"] * 2)]
        fetched = complete_all(requests, options)
        sent_to_vllm = completions_seen(vllm.url) - before
        stats = simulator.stats()
    outcomes = fetched.outcomes
    for i in (0, 1, 3, 4):
        assert outcomes[i].error is None, outcomes[i].error
    for i in (2, 5):
        error = outcomes[i].error
        assert error is not None and error["type"] == "model_unavailable"
        assert error["attempts"] == 0 and "ghost" in error["message"]
    # vLLM got its model's two requests and nothing else (no beta, no ghost: not even a 404).
    assert sent_to_vllm == 2
    assert stats.get("model:beta", 0) == 2 and stats["chat_completions"] == 2
    assert stats.get("status_404", 0) == 0
