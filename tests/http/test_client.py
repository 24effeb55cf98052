import asyncio
import base64
import logging
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

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
def no_sleeping_backoff(monkeypatch):
    monkeypatch.setattr("dspark_json.http.client.backoff", lambda attempt: 0.0)


def run(handler, n=1, config=CONFIG, **kwargs):
    return complete_all(
        [{"i": i} for i in range(n)], config, transport=httpx.MockTransport(handler), **kwargs
    )


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


def test_retry_after_header_is_honoured(monkeypatch):
    waits = []
    real_sleep = asyncio.sleep

    async def fake_sleep(seconds):
        waits.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr("dspark_json.http.client.asyncio.sleep", fake_sleep)
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
        if request.url.path == "/health":
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
        if request.url.path == "/health":
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
