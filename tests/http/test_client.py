"""The HTTP client: one request (success, retries of 5xx and of a cut body, errors in either
shape, Retry-After, backoff, timeouts, order, FAILFAST, the key as Bearer and URL credentials as
Basic, scrubbed from whatever echoes them) and one partition's requests as a whole (what the
client counts, which failures lower the in-flight limit or rest an endpoint, how a resting
endpoint is probed back, the timeouts each attempt gets, the prompt's deadline, and requests
through the environment's proxy)."""

import asyncio
import base64
import dataclasses
import gc
import json
import logging
import threading
import warnings
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import httpx
import pytest

from dspark_json import OptionError
from dspark_json.http import retry
from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.secrets import Secret

CANARY = "zq-canary-7f3a9c"  # matches none of Spark's redaction patterns
ENDPOINT = (Endpoint("http://model.test"),)
CONFIG = HttpOptions(endpoints=ENDPOINT, max_concurrency=4, request_timeout=2, max_attempts=3)


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    """No backoff sleeps, prompt health probes, and no proxy from the environment."""
    monkeypatch.setattr("dspark_json.http.client.backoff", lambda attempt: 0.0)
    monkeypatch.setattr("dspark_json.http.endpoints._PROBE_FIRST_S", 0.01)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def send(handler, requests, config, **kwargs):
    """``requests`` (the bodies) through a mock transport, as one partition."""
    return complete_all(requests, config, transport=httpx.MockTransport(handler), **kwargs)


def run(handler, n=1, config=CONFIG, **kwargs):
    """``n`` small requests, as one partition."""
    return send(handler, [{"i": i} for i in range(n)], config, **kwargs)


def test_success_returns_the_body():
    fetched = run(lambda r: httpx.Response(200, text='{"ok": true}'))
    (out,) = fetched.outcomes
    assert out.body == '{"ok": true}' and out.error is None
    assert fetched.stats.requests == 1 and fetched.stats.statuses == {"200": 1}


def test_retries_5xx_then_succeeds():
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(503 if len(calls) < 3 else 200, text="{}")

    fetched = run(handler)
    assert fetched.outcomes[0].body == "{}" and len(calls) == 3
    assert fetched.stats.retries == 2


def test_gives_up_after_max_attempts_with_the_server_message():
    def handler(request):
        return httpx.Response(500, json={"error": {"message": "boom", "type": "InternalError"}})

    (out,) = run(handler).outcomes
    assert out.body is None
    assert out.error == {"status": 500, "type": "InternalError", "message": "boom", "attempts": 3}


@pytest.mark.parametrize(
    "payload",
    [
        {"error": {"message": "bad model", "type": "NotFoundError", "param": "model", "code": 404}},
        {
            "object": "error",
            "message": "bad model",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        },
    ],
    ids=["nested-shape", "flat-shape"],
)
def test_4xx_is_not_retried_and_both_error_shapes_are_read(payload):
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(404, json=payload)

    (out,) = run(handler).outcomes
    assert len(calls) == 1
    assert out.error == {
        "status": 404,
        "type": "NotFoundError",
        "message": "bad model",
        "attempts": 1,
    }


def test_a_body_that_is_not_an_error_shape_is_kept_as_text():
    (out,) = run(lambda r: httpx.Response(400, text="<html>bad gateway</html>")).outcomes
    assert out.error["type"] == "http_400" and out.error["message"] == "<html>bad gateway</html>"


@pytest.fixture
def waits(monkeypatch):
    """The client's sleeps between attempts, recorded (and not slept)."""
    seen = []
    real_sleep = asyncio.sleep

    async def fake_sleep(seconds):
        seen.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr("dspark_json.http.client.asyncio.sleep", fake_sleep)
    return seen


def test_retry_after_header_is_honoured(waits):
    answers = iter(
        [
            httpx.Response(429, headers={"Retry-After": "1.5"}),
            httpx.Response(429, headers={"retry-after-ms": "250"}),
            httpx.Response(200, text="{}"),
        ]
    )
    (out,) = run(lambda r: next(answers)).outcomes
    assert out.body == "{}"
    assert waits == [1.5, 0.25]


def test_retry_after_as_an_http_date_and_garbage():
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < retry.retry_after(httpx.Headers({"Retry-After": soon})) <= 30
    assert retry.retry_after(httpx.Headers({"Retry-After": "soon-ish"})) is None
    assert retry.retry_after(httpx.Headers({"Retry-After": "99999"})) == 60.0  # capped


def test_a_rate_limit_is_retried_past_max_attempts_after_the_gateways_hint(waits):
    answers = iter(
        [httpx.Response(429, headers={"llm_provider-retry-after": "2"})] * 7
        + [httpx.Response(503, headers={"x-ratelimit-reset-tokens": "20ms"})] * 2
        + [httpx.Response(200, text="{}")]
    )
    fetched = run(lambda r: next(answers))  # CONFIG: maxAttempts=3
    (out,) = fetched.outcomes
    assert out.body == "{}" and fetched.stats.requests == 10
    assert waits == [2.0] * 7 + [retry.RATE_LIMIT_MIN_WAIT_S] * 2  # 20 ms: the floor
    assert fetched.stats.endpoint_rests == 0  # a 503 with a hint is a throttle, not an outage


def test_other_failures_keep_max_attempts_however_many_rate_limits_came_before():
    answers = iter([httpx.Response(429)] * 4 + [httpx.Response(500)] * 10)
    (out,) = run(lambda r: next(answers)).outcomes  # CONFIG: maxAttempts=3
    assert out.error["status"] == 500 and out.error["attempts"] == 4 + 3


def test_a_spent_quota_ends_after_max_attempts_not_the_deadline(waits):
    """OpenAI's 429 insufficient_quota: no wait ends it, so it is not retried until the
    deadline (600 s for every row) but counted as any failure."""
    quota = b'{"error": {"type": "insufficient_quota", "code": "insufficient_quota"}}'
    fetched = run(lambda r: httpx.Response(429, content=quota))  # CONFIG: maxAttempts=3
    (out,) = fetched.outcomes
    assert out.error["status"] == 429 and out.error["attempts"] == 3
    assert fetched.stats.requests == 3


def test_a_rate_limit_that_says_retry_now_is_not_resent_at_once(waits):
    """A rate limit is retried past maxAttempts, so a hint of 0 must not turn into a hot loop
    (thousands of requests a second per row until requestDeadline)."""
    hints = [{"Retry-After": "0"}, {"x-ratelimit-reset-requests": "0s"}, {"retry-after-ms": "1"}]
    answers = iter([httpx.Response(429, headers=h) for h in hints * 2] + [httpx.Response(200)])
    fetched = run(lambda r: next(answers))  # CONFIG: maxAttempts=3
    assert fetched.outcomes[0].error is None and fetched.stats.requests == 7
    assert waits == [retry.RATE_LIMIT_MIN_WAIT_S] * 6


def one_bad_of_two(status: int, text: str, *, n: int, request_deadline: float):
    """``n`` requests to two endpoints, the first answering ``status`` with ``Retry-After: 1``
    always, the other 200 (maxAttempts=3)."""

    def handler(request):
        if request.url.host == "bad.test":
            return httpx.Response(status, headers={"Retry-After": "1"}, text=text)
        return httpx.Response(200, text="{}")

    config = HttpOptions(
        endpoints=(Endpoint("http://bad.test"), Endpoint("http://good.test")),
        max_concurrency=4,
        max_attempts=3,
        request_deadline=request_deadline,
    )
    return run(handler, n=n, config=config)


def test_an_endpoint_that_answers_503_with_a_hint_forever_rests(waits):
    """A proxy in front of a dead server may answer 503 with Retry-After forever: the endpoint
    rests as for any 503, and the rows go to the healthy one (they used to stay on the dead
    one until requestDeadline, half of them failing)."""

    fetched = one_bad_of_two(503, "<html>503</html>", n=20, request_deadline=5)
    assert all(out.error is None for out in fetched.outcomes)
    assert fetched.stats.endpoint_rests == 1 and fetched.stats.statuses["503"] <= 4


def test_a_rate_limited_retry_goes_to_another_endpoint_first(waits):
    """One gateway of two whose key has used its limit (429 forever, not a spent quota): the
    rows it throttles are retried at the other one, not held on it until requestDeadline
    (prefixOrder ranks each row's endpoint first; the retry must not follow that ranking)."""

    fetched = one_bad_of_two(429, "{}", n=40, request_deadline=30)
    assert all(out.error is None for out in fetched.outcomes)
    assert fetched.stats.statuses["429"] <= 40  # each row throttled there once at most
    assert len(waits) == fetched.stats.statuses["429"]


def test_a_rate_limit_without_end_stops_at_request_deadline():
    config = HttpOptions(endpoints=ENDPOINT, max_attempts=2, request_deadline=0.5)
    fetched = run(lambda r: httpx.Response(429, headers={"retry-after-ms": "100"}), config=config)
    (out,) = fetched.outcomes
    assert out.error["status"] == 429 and 3 <= out.error["attempts"] <= 6
    assert "requestDeadline=0.5s" in out.error["message"]


def test_backoff_is_full_jitter_and_capped():
    draws = [retry.backoff(attempt) for attempt in (1, 2, 10) for _ in range(200)]
    assert all(0 <= d <= 8.0 for d in draws)
    assert max(draws[:200]) <= 0.25 and max(draws[400:]) > 4.0
    # Full jitter: spread over [0, cap], not a fixed delay per attempt (which would make the
    # tasks of a stage retry in lockstep).
    third = [retry.backoff(3) for _ in range(400)]
    assert min(third) < 0.1 and max(third) > 0.9 and len(set(third)) > 300


def test_retry_after_beyond_the_deadline_gives_up_at_once():
    config = HttpOptions(endpoints=ENDPOINT, max_attempts=5, request_deadline=5)
    (out,) = run(
        lambda r: httpx.Response(429, headers={"Retry-After": "30"}), config=config
    ).outcomes
    assert out.error["attempts"] == 1 and "requestDeadline=5s" in out.error["message"]


def test_connection_errors_are_retried_and_reported_without_the_url():
    def handler(request):
        raise httpx.ConnectError("connection refused", request=request)

    (out,) = run(handler).outcomes
    assert out.error["type"] == "ConnectError" and out.error["attempts"] == 3
    assert "model.test" not in out.error["message"]


def test_a_body_cut_short_is_retried():
    calls = []

    def handler(request):
        calls.append(1)
        if len(calls) == 1:
            raise httpx.RemoteProtocolError("peer closed connection", request=request)
        return httpx.Response(200, text="{}")

    assert run(handler).outcomes[0].body == "{}" and len(calls) == 2


def test_a_request_over_its_timeout_is_cut_and_retried():
    calls = []

    async def handler(request):
        calls.append(1)
        if len(calls) == 1:
            await asyncio.sleep(5)
        return httpx.Response(200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, request_timeout=0.2, max_attempts=2)
    fetched = run(handler, config=config)
    assert fetched.outcomes[0].body == "{}" and fetched.stats.statuses["timeout"] == 1


def test_outcomes_keep_request_order_and_skip_none():
    def handler(request):
        return httpx.Response(200, text=request.content.decode())

    fetched = complete_all(
        [{"i": 0}, None, {"i": 2}], CONFIG, transport=httpx.MockTransport(handler)
    )
    assert [o.body for o in fetched.outcomes] == ['{"i": 0}', None, '{"i": 2}']


def test_failfast_stops_sending_after_the_first_failure():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(400, json={"error": {"message": "no", "type": "BadRequestError"}})

    config = HttpOptions(endpoints=ENDPOINT, max_concurrency=1, initial_concurrency=1)
    fetched = run(handler, n=50, config=config, stop_on_failure=True)
    assert len(calls) == 1
    assert fetched.outcomes[0].error is not None
    assert all(o.body is None and o.error is None for o in fetched.outcomes[1:])


def test_the_key_is_sent_as_bearer_and_scrubbed_from_echoed_errors():
    seen = []

    def handler(request):
        seen.append(request.headers["authorization"])
        return httpx.Response(401, json={"error": {"message": f"Invalid key {CANARY}"}})

    config = HttpOptions(endpoints=ENDPOINT, api_key=Secret(CANARY))
    (out,) = run(handler, config=config).outcomes
    assert seen == [f"Bearer {CANARY}"]
    assert CANARY not in repr(out.error) and "***" in out.error["message"]
    assert CANARY not in repr(config)


def test_credentials_from_the_endpoint_url_go_as_basic_auth():
    seen = []

    def handler(request):
        seen.append((str(request.url), request.headers["authorization"]))
        return httpx.Response(200, text="{}")

    endpoint = Endpoint("http://model.test", Secret("ann:pw"))
    run(handler, config=HttpOptions(endpoints=(endpoint,)))
    assert seen == [
        ("http://model.test/v1/chat/completions", "Basic " + base64.b64encode(b"ann:pw").decode())
    ]


def test_a_missing_api_key_variable_is_named(monkeypatch):
    monkeypatch.delenv("DSPARK_TEST_KEY", raising=False)
    config = HttpOptions(endpoints=ENDPOINT, api_key_env="DSPARK_TEST_KEY")
    with pytest.raises(OptionError, match="'DSPARK_TEST_KEY', which is not set"):
        run(lambda r: httpx.Response(200), config=config)
    monkeypatch.setenv("DSPARK_TEST_KEY", CANARY)
    seen = []
    run(lambda r: seen.append(r.headers["authorization"]) or httpx.Response(200), config=config)
    assert seen == [f"Bearer {CANARY}"]


def test_in_flight_requests_never_exceed_the_limit():
    state = {"now": 0, "peak": 0}

    async def handler(request):
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.005)
        state["now"] -= 1
        return httpx.Response(200, text="{}")

    fixed = HttpOptions(endpoints=ENDPOINT, max_concurrency=6, adaptive_concurrency=False)
    fetched = run(handler, n=120, config=fixed)
    assert state["peak"] == 6 and fetched.stats.limit_peak == 6
    state["peak"] = 0
    adaptive = HttpOptions(endpoints=ENDPOINT, max_concurrency=16, initial_concurrency=2)
    fetched = run(handler, n=300, config=adaptive)
    assert fetched.stats.limit_lowest == 2 and fetched.stats.limit_peak == 16
    assert state["peak"] <= 16


def test_load_is_spread_and_a_failing_endpoint_rests_until_health_answers():
    a, b = Endpoint("http://a.test"), Endpoint("http://b.test")
    sent = {"a.test": 0, "b.test": 0}
    health = {"a.test": 0}

    async def handler(request):
        host = request.url.host
        if request.url.path == "/v1/models":
            health[host] += 1
            return httpx.Response(200)
        sent[host] += 1
        if host == "a.test" and sent[host] <= 3:
            raise httpx.ConnectError("refused", request=request)
        await asyncio.sleep(0.03)  # 40 requests outlast the first probe (0.5 s)
        return httpx.Response(200, text="{}")

    config = HttpOptions(endpoints=(a, b), max_concurrency=1, initial_concurrency=1)
    fetched = run(handler, n=40, config=config)
    assert all(o.body == "{}" for o in fetched.outcomes)
    assert fetched.stats.endpoint_rests == 1 and health["a.test"] >= 1
    assert sent["a.test"] > 3 and sent["b.test"] > 3  # a came back after its probe


def test_no_log_line_carries_the_key_or_url_credentials(caplog):
    caplog.set_level(logging.DEBUG)

    def handler(request):
        if request.url.path == "/v1/models":
            return httpx.Response(503)
        raise httpx.ConnectError(f"refused for url {request.url}", request=request)

    endpoint = Endpoint("http://model.test", Secret(f"ann:{CANARY}"))
    config = HttpOptions(
        endpoints=(endpoint,), api_key=Secret(CANARY), max_attempts=4, request_deadline=1.5
    )
    fetched = run(handler, n=3, config=config)
    assert fetched.stats.endpoint_rests == 1
    assert {o.error["type"] for o in fetched.outcomes} == {"endpoint_unavailable"}
    assert "failed 3 times in a row" in caplog.text
    assert CANARY not in caplog.text and CANARY not in repr(fetched)


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
    fetched = send(handler, [{"i": i} for i in range(4)], config)
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
    stats = send(lambda r: next(answers), [{"i": i} for i in range(10)], config).stats
    assert (stats.limit_peak, stats.limit_lowest, stats.limit_final) == (5, 5, 5)


def test_a_latency_jump_lowers_the_limit():
    done = []

    async def handler(request):
        done.append(1)
        await asyncio.sleep(0.001 if len(done) <= 4 else 0.3)
        return httpx.Response(200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, initial_concurrency=4, max_concurrency=64)
    stats = send(handler, [{"i": i} for i in range(12)], config).stats
    # 4 fast answers double the limit to 8; 8 answers 300x slower cut it to 6.
    assert (stats.limit_peak, stats.limit_final) == (8, 6)


def test_client_errors_neither_lower_the_limit_nor_rest_the_endpoint():
    config = HttpOptions(
        endpoints=ENDPOINT, initial_concurrency=8, max_concurrency=8, max_attempts=3
    )
    stats = send(lambda r: httpx.Response(400), [{"i": i} for i in range(6)], config).stats
    assert (stats.limit_lowest, stats.endpoint_rests, stats.failed) == (8, 0, 6)
    # A rate limit is retried until requestDeadline, not maxAttempts times.
    throttled = dataclasses.replace(config, request_deadline=1.0)
    overloaded = send(lambda r: httpx.Response(429), [{"i": 0}], throttled).stats
    assert overloaded.limit_lowest < 8 and overloaded.endpoint_rests == 0
    assert overloaded.requests > config.max_attempts
    down = send(lambda r: httpx.Response(503), [{"i": 0}], config).stats
    assert down.limit_lowest == 4 and down.endpoint_rests == 1


def test_a_resting_endpoint_comes_back_only_when_health_answers_below_500():
    probes = []
    health = iter(["refused", 500, 404])

    def handler(request):
        if request.url.path == "/v1/models":
            probes.append((request.method, request.extensions["timeout"]))
            answer = next(health)
            if answer == "refused":
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(answer)
        if len(probes) < 3:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, max_attempts=10, request_deadline=10)
    fetched = send(handler, [{"i": 0}], config)
    assert fetched.outcomes[0].body == "{}" and fetched.stats.endpoint_rests == 1
    five = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
    assert probes == [("GET", five)] * 3


def test_a_router_whose_health_stays_503_gets_its_endpoint_back_by_its_completions():
    """vllm-router's /health is 503 while any one worker is down, though completions go
    through: a benched endpoint is probed at /v1/models and comes back on its completions."""
    paths: list[str] = []
    failures = iter([True] * 3)

    def handler(request):
        paths.append(request.url.path)
        if request.url.path == "/health":
            return httpx.Response(503)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        if next(failures, False):
            return httpx.Response(502)
        return httpx.Response(200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, max_attempts=10, request_deadline=10)
    fetched = send(handler, [{"i": 0}], config)
    assert fetched.outcomes[0].body == "{}" and fetched.stats.endpoint_rests == 1
    assert "/health" not in paths and paths.count("/v1/models") == 1


def test_a_prompt_whose_endpoints_all_rest_names_the_last_error_masked():
    def handler(request):
        if request.url.path == "/v1/models":
            return httpx.Response(503)
        raise httpx.ConnectError(f"refused {CANARY}", request=request)

    config = HttpOptions(
        endpoints=ENDPOINT, api_key=Secret(CANARY), max_attempts=10, request_deadline=0.3
    )
    (out,) = send(handler, [{"i": 0}], config).outcomes
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
    send(handler, [{"i": 0}], config)
    unset = HttpOptions(endpoints=ENDPOINT, connect_timeout=1.5, request_timeout=60)
    send(handler, [{"i": 0}], unset)  # no readTimeout: silence may last the whole request
    assert seen == [
        ("POST", {"connect": 1.5, "read": 7.0, "write": 7.0, "pool": None}),
        ("POST", {"connect": 1.5, "read": 60, "write": 60, "pool": None}),
    ]


def test_no_attempt_runs_past_the_prompt_deadline():
    """The server never answers and the request's timeout is longer than the test may run: only
    the prompt's deadline can end the attempt, which the handler sees as its cancellation."""
    cancelled = threading.Event()

    async def handler(request):
        try:
            await asyncio.Event().wait()  # never set: no answer, ever
        finally:
            cancelled.set()
        return httpx.Response(200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, request_timeout=3600, request_deadline=0.2)
    (out,) = send(handler, [{"i": 0}], config).outcomes
    assert cancelled.is_set()
    assert out.error is not None and out.error["type"] == "timeout"
    assert out.error["attempts"] == 1 and "requestDeadline=0.2s" in out.error["message"]


def test_giving_up_before_the_deadline_keeps_the_server_message():
    def handler(request):
        return httpx.Response(429, headers={"Retry-After": "30"}, json={"message": "slow down"})

    config = HttpOptions(endpoints=ENDPOINT, max_attempts=5, request_deadline=5)
    (out,) = send(handler, [{"i": 0}], config).outcomes
    assert out.error["message"] == (
        "slow down (gave up: the next attempt would start after requestDeadline=5s)"
    )


def test_a_transport_error_that_echoes_the_key_is_masked():
    def handler(request):
        raise httpx.ReadError(f"reset after Bearer {CANARY}", request=request)

    config = HttpOptions(endpoints=ENDPOINT, api_key=Secret(CANARY), max_attempts=1)
    (out,) = send(handler, [{"i": 0}], config).outcomes
    assert out.error["message"] == "reset after Bearer ***"


def test_request_bytes_are_sent_as_given_and_a_200_body_not_utf8_keeps_its_bytes():
    sent = []

    def handler(request):
        sent.append(request.content)
        return httpx.Response(200, content=b'{"a": "\xff"}')

    fetched = send(handler, [b'{"model": "m"}'], HttpOptions(endpoints=ENDPOINT))
    assert sent == [b'{"model": "m"}']
    assert fetched.outcomes[0].body == '{"a": "\\xff"}'
    assert fetched.outcomes[0].error["type"] == "invalid_utf8"


def test_by_default_a_failure_does_not_stop_the_others():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(400 if len(calls) == 1 else 200, text="{}")

    config = HttpOptions(endpoints=ENDPOINT, max_concurrency=1, initial_concurrency=1)
    fetched = send(handler, [{"i": i} for i in range(3)], config)
    assert len(calls) == 3
    assert [o.body for o in fetched.outcomes] == [None, "{}", "{}"]


def test_an_unset_key_variable_is_named_with_the_fix(monkeypatch):
    monkeypatch.delenv("ZQ_UNSET_KEY", raising=False)
    config = HttpOptions(endpoints=ENDPOINT, api_key_env="ZQ_UNSET_KEY")
    with pytest.raises(OptionError) as caught:
        send(lambda r: httpx.Response(200), [{"i": 0}], config)
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
