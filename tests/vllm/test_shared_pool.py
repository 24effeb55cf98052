"""Options priority and maxServerQueue against real vLLM (the tier's CPU build): the request
field and the gauges are vLLM's own, not the simulator's idea of them.

The tier's session server runs with vLLM's default scheduling (fcfs): where vLLM refuses a
priority there, ``.load()`` says so before any prompt (vLLM 0.32 accepts and ignores it). A
second server started with ``--scheduling-policy priority`` accepts it (it costs a second vLLM
start, a few minutes on a CPU).
"""

from __future__ import annotations

import os

import httpx
import pytest

from dspark_json.errors import ServerError
from dspark_json.http.gauges import parse_gauges
from dspark_json.load import prepare
from dspark_json.options import Options
from tests.vllm.server import MODEL, VllmServer

pytestmark = [pytest.mark.vllm]


def _options(url: str, **extra: str) -> Options:
    return Options.parse({"endpoint": url, "prompts": "/p", "model": MODEL, **extra})


def test_a_priority_on_fcfs_vllm_is_refused_at_load_where_vllm_refuses_it(vllm):
    """vLLM versions that refuse a priority under fcfs (400 "Priority scheduling is not
    enabled") fail ``.load()`` naming the flag; vLLM 0.32, the tier's, accepts it and ignores
    it, and ``.load()`` then goes on (nothing the server exposes tells the policies apart)."""
    body = {
        "model": vllm.model,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 1,
        "priority": 10,
    }
    answer = httpx.post(f"{vllm.url}/v1/chat/completions", json=body, timeout=120)
    if answer.status_code == 200:  # vLLM 0.32: accepted under fcfs
        assert prepare(_options(vllm.url, priority="10")).model == MODEL
        return
    assert answer.status_code == 400
    assert "Priority scheduling is not enabled" in answer.text
    with pytest.raises(ServerError, match="--scheduling-policy priority") as caught:
        prepare(_options(vllm.url, priority="10"))
    assert "Option 'priority'=10" in str(caught.value)


def test_vllm_metrics_have_the_gauges_the_gate_reads(vllm):
    text = httpx.get(f"{vllm.url}/metrics", timeout=30).text
    for name in ("num_requests_waiting", "num_requests_running", "kv_cache_usage_perc"):
        assert f"vllm:{name}{{" in text
    gauges = parse_gauges(text)
    assert gauges is not None
    waiting, running, kv = gauges
    assert waiting >= 0 and running >= 0 and 0 <= kv <= 1


@pytest.mark.skipif(
    bool(os.environ.get("DSPARK_VLLM_URL")), reason="starts a vLLM of its own: not with a URL"
)
def test_priority_vllm_accepts_the_option():
    with VllmServer("--scheduling-policy", "priority") as server:
        query = prepare(_options(server.url, priority="10"))
        assert query.model == MODEL
