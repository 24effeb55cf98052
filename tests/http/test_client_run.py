"""One partition's requests as a whole: what the client counts, which failures lower the in-flight
limit or rest an endpoint, how a resting endpoint is probed back, the timeouts each attempt gets,
and requests through the environment's proxy."""

import asyncio
import gc
import json
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import httpx
import pytest

from dspark_json import OptionError
from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.secrets import Secret

CANARY = "zq-canary-7f3a9c"
ENDPOINT = (Endpoint("http://model.test"),)


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr("dspark_json.http.client.backoff", lambda attempt: 0.0)
    monkeypatch.setattr("dspark_json.http.endpoints._PROBE_FIRST_S", 0.01)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def run(handler, requests, config):
    return complete_all(requests, config, transport=httpx.MockTransport(handler))


def test_the_stats_count_attempts_retries_failures_statuses_and_latencies():
    seen: dict[int, int] = {}

    def handler(request):
        i = json.loads(request.content)["i"]
        seen[i] = seen.get(i, 0) + 1
        if i == 1 and seen[i] < 3:
            return httpx.Response(503)
        if i == 2:
            return httpx.Response(400, json={"error": {"message": "no", "type": "BadRequest"}})
        if i == 3:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, max_attempts=3, max_concurrency=1)
    fetched = run(handler, [{"i": i} for i in range(4)], config)
    stats = fetched.stats
    assert (stats.requests, stats.retries, stats.failed) == (8, 4, 2)
    assert stats.statuses == {"200": 2, "503": 2, "400": 1, "ConnectError": 3}
    assert len(stats.latencies) == 2 and all(0 <= s < 5 for s in stats.latencies)
    assert [o.error["attempts"] if o.error else None for o in fetched.outcomes] == [
        None, None, 1, 3,
    ]  # fmt: skip


def test_without_adaptation_the_limit_stays_at_its_maximum_through_overload():
    answers = iter([httpx.Response(503)] * 3 + [httpx.Response(200, text="{}")] * 20)
    config = HttpOptions(endpoints=ENDPOINT, max_concurrency=5, adaptive_concurrency=False)
    stats = run(lambda r: next(answers), [{"i": i} for i in range(10)], config).stats
    assert (stats.limit_peak, stats.limit_lowest, stats.limit_final) == (5, 5, 5)


def test_a_latency_jump_lowers_the_limit():
    done = []

    async def handler(request):
        done.append(1)
        await asyncio.sleep(0.001 if len(done) <= 4 else 0.3)
        return httpx.Response(200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, initial_concurrency=4, max_concurrency=64)
    stats = run(handler, [{"i": i} for i in range(12)], config).stats
    # 4 fast answers double the limit to 8; 8 answers 300x slower cut it to 6.
    assert (stats.limit_peak, stats.limit_final) == (8, 6)


def test_client_errors_neither_lower_the_limit_nor_rest_the_endpoint():
    config = HttpOptions(
        endpoints=ENDPOINT, initial_concurrency=8, max_concurrency=8, max_attempts=3
    )
    stats = run(lambda r: httpx.Response(400), [{"i": i} for i in range(6)], config).stats
    assert (stats.limit_lowest, stats.endpoint_rests, stats.failed) == (8, 0, 6)
    overloaded = run(lambda r: httpx.Response(429), [{"i": 0}], config).stats
    assert overloaded.limit_lowest == 4 and overloaded.endpoint_rests == 0
    down = run(lambda r: httpx.Response(503), [{"i": 0}], config).stats
    assert down.limit_lowest == 4 and down.endpoint_rests == 1


def test_a_resting_endpoint_comes_back_only_when_health_answers_below_500():
    probes = []
    health = iter(["refused", 500, 404])

    def handler(request):
        if request.url.path == "/health":
            probes.append((request.method, request.extensions["timeout"]))
            answer = next(health)
            if answer == "refused":
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(answer)
        if len(probes) < 3:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, max_attempts=10, request_deadline=10)
    fetched = run(handler, [{"i": 0}], config)
    assert fetched.outcomes[0].body == "{}" and fetched.stats.endpoint_rests == 1
    five = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
    assert probes == [("GET", five)] * 3


def test_a_prompt_whose_endpoints_all_rest_names_the_last_error_masked():
    def handler(request):
        if request.url.path == "/health":
            return httpx.Response(503)
        raise httpx.ConnectError(f"refused {CANARY}", request=request)

    config = HttpOptions(
        endpoints=ENDPOINT, api_key=Secret(CANARY), max_attempts=10, request_deadline=0.3
    )
    (out,) = run(handler, [{"i": 0}], config).outcomes
    assert out.error == {
        "status": None,
        "type": "endpoint_unavailable",
        "message": "no endpoint (http://model.test) was healthy within requestDeadline=0.3s; "
        "last error: ConnectError: refused ***",
        "attempts": 3,
    }


def test_each_attempt_is_a_post_with_the_connect_and_read_timeouts():
    seen = []

    def handler(request):
        seen.append((request.method, request.extensions["timeout"]))
        return httpx.Response(200, text="{}")

    config = HttpOptions(
        endpoints=ENDPOINT, connect_timeout=1.5, read_timeout=7.0, request_timeout=60
    )
    run(handler, [{"i": 0}], config)
    unset = HttpOptions(endpoints=ENDPOINT, connect_timeout=1.5, request_timeout=60)
    run(handler, [{"i": 0}], unset)  # no readTimeout: silence may last the whole request
    assert seen == [
        ("POST", {"connect": 1.5, "read": 7.0, "write": 7.0, "pool": None}),
        ("POST", {"connect": 1.5, "read": 60, "write": 60, "pool": None}),
    ]


def test_no_attempt_runs_past_the_prompt_deadline():
    async def handler(request):
        await asyncio.sleep(0.8)
        return httpx.Response(200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, request_timeout=30, request_deadline=0.2)
    started = time.monotonic()
    (out,) = run(handler, [{"i": 0}], config).outcomes
    assert out.error is not None and out.error["type"] == "timeout"
    assert time.monotonic() - started < 0.6


def test_giving_up_before_the_deadline_keeps_the_server_message():
    def handler(request):
        return httpx.Response(429, headers={"Retry-After": "30"}, json={"message": "slow down"})

    config = HttpOptions(endpoints=ENDPOINT, max_attempts=5, request_deadline=5)
    (out,) = run(handler, [{"i": 0}], config).outcomes
    assert out.error["message"] == (
        "slow down (gave up: the next attempt would start after requestDeadline=5s)"
    )


def test_a_transport_error_that_echoes_the_key_is_masked():
    def handler(request):
        raise httpx.ReadError(f"reset after Bearer {CANARY}", request=request)

    config = HttpOptions(endpoints=ENDPOINT, api_key=Secret(CANARY), max_attempts=1)
    (out,) = run(handler, [{"i": 0}], config).outcomes
    assert out.error["message"] == "reset after Bearer ***"


def test_request_bytes_are_sent_as_given_and_a_200_body_not_utf8_keeps_its_bytes():
    sent = []

    def handler(request):
        sent.append(request.content)
        return httpx.Response(200, content=b'{"a": "\xff"}')

    fetched = run(handler, [b'{"model": "m"}'], HttpOptions(endpoints=ENDPOINT))
    assert sent == [b'{"model": "m"}']
    assert fetched.outcomes[0].body == '{"a": "\\xff"}'
    assert fetched.outcomes[0].error["type"] == "invalid_utf8"


def test_by_default_a_failure_does_not_stop_the_others():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(400 if len(calls) == 1 else 200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, max_concurrency=1, initial_concurrency=1)
    fetched = run(handler, [{"i": i} for i in range(3)], config)
    assert len(calls) == 3
    assert [o.body for o in fetched.outcomes] == [None, "{}", "{}"]


def test_an_unset_key_variable_is_named_with_the_fix(monkeypatch):
    monkeypatch.delenv("ZQ_UNSET_KEY", raising=False)
    config = HttpOptions(endpoints=ENDPOINT, api_key_env="ZQ_UNSET_KEY")
    with pytest.raises(OptionError) as caught:
        run(lambda r: httpx.Response(200), [{"i": 0}], config)
    assert str(caught.value) == (
        "Option 'apiKeyEnv' names the environment variable 'ZQ_UNSET_KEY', which is not set "
        "where this task runs. Set it on every executor (e.g. spark.executorEnv.<NAME>), or "
        "drop the option if the server needs no key."
    )


class _Proxy(BaseHTTPRequestHandler):
    """Answers every request itself, as a forward proxy in front of the server would relay it."""

    seen: ClassVar[list[str]] = []

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        _Proxy.seen.append(self.path)
        body = b'{"via": "proxy"}'
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def proxy():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Proxy.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_requests_go_through_the_proxy_the_environment_sets(proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy)
    config = HttpOptions(endpoints=(Endpoint("http://model.test:9"),), max_attempts=1)
    fetched = complete_all([{"i": 0}, {"i": 1}], config)
    assert [o.body for o in fetched.outcomes] == ['{"via": "proxy"}'] * 2
    assert _Proxy.seen == ["http://model.test:9/v1/chat/completions"] * 2


def test_no_proxy_sends_directly(proxy, monkeypatch):
    port = proxy.rsplit(":", 1)[1]
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    config = HttpOptions(endpoints=(Endpoint(f"http://127.0.0.1:{port}"),), max_attempts=1)
    fetched = complete_all([{"i": 0}], config)
    assert fetched.outcomes[0].body == '{"via": "proxy"}'
    assert _Proxy.seen == ["/v1/chat/completions"]


class _Flaky(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive: three 503s, then answers; /health always answers."""

    protocol_version = "HTTP/1.1"
    posts: ClassVar[list[int]] = []

    def do_GET(self):
        self._answer(200, b"")

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        _Flaky.posts.append(1)
        self._answer(503 if len(_Flaky.posts) <= 3 else 200, b"{}")

    def _answer(self, status, body):
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_partition_leaves_no_connection_open():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Flaky.posts = []
    url = f"http://127.0.0.1:{server.server_address[1]}"
    config = HttpOptions(endpoints=(Endpoint(url),), max_attempts=10, max_concurrency=2)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            fetched = complete_all([{"i": 0}, {"i": 1}], config)  # a rest, a probe, answers
            assert [o.body for o in fetched.outcomes] == ["{}", "{}"]
            assert fetched.stats.endpoint_rests == 1
            gc.collect()
        unclosed = [w for w in caught if issubclass(w.category, ResourceWarning)]
        assert unclosed == []
    finally:
        server.shutdown()
        server.server_close()
