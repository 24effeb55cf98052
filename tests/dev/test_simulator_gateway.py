"""The simulator's gateway mode (``--gateway litellm``) and rate limit (``--rpm``), through the
command line in a process of its own: what LiteLLM's proxy does that a client must survive."""

import asyncio
import json
import threading
import time

import httpx

from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults, Simulator

KEY = "zq-canary-gateway-5"
AUTH = {"authorization": f"Bearer {KEY}"}


def chat(url: str, text: str, **headers: str) -> httpx.Response:
    body = {"model": "dspark-sim", "messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=10)


def test_litellm_mode_answers_the_key_health_and_envelope_as_litellm_does():
    faults = Faults(gateway="litellm", api_key=KEY)
    with SimulatorProcess(model="a,b", faults=faults) as server:
        no_key = httpx.get(f"{server.url}/health", timeout=10)
        wrong = httpx.get(f"{server.url}/v1/models", headers={"authorization": "Bearer x"})
        models_no_key = httpx.get(f"{server.url}/v1/models", timeout=10)
        health = httpx.get(f"{server.url}/health", headers=AUTH, timeout=10)
        alive = httpx.get(f"{server.url}/health/liveliness", timeout=10)
        body = {"model": "a", "messages": [{"role": "user", "content": "hi"}], "n": 2}
        answer = httpx.post(
            f"{server.url}/v1/chat/completions", json=body, headers=AUTH, timeout=10
        ).json()
        stats = server.stats()
    assert no_key.status_code == 500 and "No api key passed in" in no_key.text
    assert wrong.status_code == 400 and "No connected db" in wrong.text
    assert models_no_key.status_code == 401
    assert health.status_code == 200 and alive.status_code == 200
    assert stats["health_completions"] == 2  # one per model, per /health
    assert stats.get("chat_completions") == 1
    for choice in answer["choices"]:
        assert "stop_reason" not in choice  # moved into provider_specific_fields
        assert choice["provider_specific_fields"]["stop_reason"] is None
        assert choice["message"]["provider_specific_fields"] == {"reasoning": None}
        assert "reasoning" not in choice["message"]  # moved there too (LiteLLM 1.108)
        assert choice["message"]["content"]


def test_rpm_answers_429_with_the_seconds_to_the_next_window():
    """Through the command line: the limit and the 429's shape. The window is an hour, so that
    six requests always fall in one window, however slow the machine (with a 2 s window, six
    requests on a loaded machine outlasted it, and the sixth was not limited)."""
    for gateway, header in (("litellm", "llm_provider-retry-after"), (None, "retry-after")):
        faults = Faults(gateway=gateway, rpm=3, rate_window=3600.0)  # type: ignore[arg-type]
        with SimulatorProcess(faults=faults) as server:
            first = [chat(server.url, f"p{i}").status_code for i in range(5)]
            limited = chat(server.url, "p5")
            stats = server.stats()
        assert first == [200, 200, 200, 429, 429]
        assert limited.status_code == 429 and 1 <= int(limited.headers[header]) <= 3600
        assert "Rate limit reached: 3 requests per 3600s" in limited.text
        assert stats["rate_limited"] == 3


def test_rpm_s_hint_is_the_seconds_to_the_next_window_on_the_simulator_s_clock():
    """The window's arithmetic on a clock the test moves: the hint, and a new window once it is
    over."""
    server = Simulator(faults=Faults(rpm=2, rate_window=2.0))
    now = [100.0]
    server.clock = lambda: now[0]
    body = json.dumps({"model": "dspark-sim", "messages": [{"role": "user", "content": "x"}]})

    def at(when: float) -> tuple[int, str | None]:
        now[0] = when
        reply = asyncio.run(server.route("POST", "/v1/chat/completions", body.encode()))
        return reply.status, reply.headers.get("retry-after")

    assert [at(100.0), at(100.1)] == [(200, None), (200, None)]
    assert at(100.4) == (429, "2")  # 1.6 s left, rounded up
    assert at(101.5) == (429, "1")  # 0.5 s left
    assert at(101.999) == (429, "1")  # never 0: a client would ask again at once
    assert at(102.0) == (200, None)  # the next window
    assert at(102.5) == (200, None) and at(103.9) == (429, "1")
    assert server.counts["rate_limited"] == 4


def test_llm_d_mode_sheds_sheddable_objectives_under_load_and_says_when_no_backend():
    faults = Faults(gateway="llm-d", objectives={"batch": -1}, capacity=1, no_backend=True)
    with SimulatorProcess(latency=0.5, faults=faults) as server:
        empty = chat(server.url, "early")
        server.set_backend(True)
        holder = threading.Thread(target=lambda: chat(server.url, "hold the only place"))
        holder.start()
        time.sleep(0.2)  # the place is taken
        shed = chat(server.url, "batch", **{"x-llm-d-inference-objective": "batch"})
        interactive_waits = chat(server.url, "interactive")
        holder.join()
        stats = server.stats()
    assert empty.status_code == 503 and "no healthy upstream" in empty.text
    assert shed.status_code == 429 and "saturated" in shed.headers["x-llm-d-request-dropped-reason"]
    assert interactive_waits.status_code == 200  # not sheddable: it waits for the place
    assert stats["shed"] == 1 and stats["no_backend"] == 1


def test_llm_d_backends_switch_answers_400_to_a_body_it_cannot_read():
    """The guide's ``curl -X POST .../gateway/backends -d '{"ready": false}'`` with a typo:
    a 400 saying what to send, not a traceback and a connection closed without an answer."""
    with SimulatorProcess(faults=Faults(gateway="llm-d")) as server:
        url = f"{server.url}/gateway/backends"
        answers = [httpx.post(url, content=body, timeout=10) for body in (b"[]", b'{"ready": tru')]
        answers.append(httpx.post(url, content=b'{"ready": "no"}', timeout=10))
        off = httpx.post(url, content=b'{"ready": false}', timeout=10)
    assert [a.status_code for a in answers] == [400, 400, 400]
    assert '{\\"ready\\": true}' in answers[0].text or '{"ready": true}' in answers[0].text
    assert off.json() == {"ready": False}
