"""How long a retry waits: the backoff window per attempt, and the server's Retry-After in each
form it takes (seconds, an HTTP date with or without a zone, retry-after-ms)."""

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from dspark_json.http.retry import backoff, rate_limited, retry_after


@pytest.fixture(autouse=True)
def seeded(monkeypatch):
    monkeypatch.setattr("dspark_json.http.retry.random", random.Random(20))


@pytest.mark.parametrize(
    ("attempt", "window"),
    [(1, 0.25), (2, 0.5), (3, 1.0), (4, 2.0), (5, 4.0), (6, 8.0), (7, 8.0), (30, 8.0)],
    ids=str,
)
def test_each_attempt_waits_anywhere_in_a_window_that_doubles_up_to_8s(attempt, window):
    draws = [backoff(attempt) for _ in range(500)]
    assert max(draws) <= window
    assert max(draws) > 0.9 * window and min(draws) < 0.1 * window


@pytest.mark.parametrize(
    ("given", "wait"),
    [
        ({"Retry-After": "0"}, 0.0),
        ({"Retry-After": "0.5"}, 0.5),
        ({"Retry-After": "-3"}, 0.0),
        ({"Retry-After": "61"}, 60.0),
        ({"retry-after-ms": "0"}, 0.0),
        ({"retry-after-ms": "400"}, 0.4),
        ({"retry-after-ms": "-400"}, 0.0),
        ({"retry-after-ms": "120000"}, 60.0),
        # milliseconds win over seconds; unreadable milliseconds fall back to seconds
        ({"retry-after-ms": "100", "Retry-After": "7"}, 0.1),
        ({"retry-after-ms": "soon", "Retry-After": "7"}, 7.0),
        ({"retry-after-ms": "soon"}, None),
        ({}, None),
    ],
    ids=repr,
)
def test_retry_after_in_seconds_or_milliseconds_is_clamped_to_0_to_60s(given, wait):
    assert retry_after(httpx.Headers(given)) == (pytest.approx(wait) if wait is not None else None)


def test_an_http_date_is_read_with_or_without_a_zone_and_a_past_date_means_now():
    when = datetime.now(UTC) + timedelta(seconds=30)
    in_gmt = format_datetime(when, usegmt=True)
    no_zone = format_datetime(when.replace(tzinfo=None))  # "-0000": UTC by RFC 5322
    assert no_zone.endswith("-0000")
    for text in (in_gmt, no_zone):
        assert 25 < retry_after(httpx.Headers({"Retry-After": text})) <= 30
    past = format_datetime(datetime.now(UTC) - timedelta(hours=1), usegmt=True)
    assert retry_after(httpx.Headers({"Retry-After": past})) == 0.0
    far = format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)
    assert retry_after(httpx.Headers({"Retry-After": far})) == 60.0


@pytest.mark.parametrize(
    ("given", "wait"),
    [
        ({"llm_provider-retry-after": "7"}, 7.0),  # LiteLLM: the provider's Retry-After
        ({"llm_provider-retry-after": "600"}, 60.0),
        ({"llm_provider-retry-after": "x", "x-ratelimit-reset-requests": "2s"}, 2.0),
        ({"Retry-After": "3", "llm_provider-retry-after": "7"}, 3.0),  # the standard wins
        ({"x-ratelimit-reset-requests": "1s"}, 1.0),
        ({"x-ratelimit-reset-requests": "20ms"}, 0.02),
        ({"x-ratelimit-reset-tokens": "6m0s"}, 60.0),  # capped
        ({"x-ratelimit-reset-tokens": "1m30.5s"}, 60.0),
        ({"x-ratelimit-reset-tokens": "12.5s"}, 12.5),
        ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "250ms"}, 1.0),
        ({"x-ratelimit-reset-requests": "0.5", "x-ratelimit-reset-tokens": "4s"}, 4.0),
        ({"x-ratelimit-reset-requests": "soon"}, None),
        ({"x-ratelimit-reset-requests": "1s2"}, None),
    ],
    ids=repr,
)
def test_gateway_and_openai_hints_are_read_and_capped(given, wait):
    assert retry_after(httpx.Headers(given)) == (pytest.approx(wait) if wait is not None else None)


@pytest.mark.parametrize(
    ("status", "headers", "throttled"),
    [
        (429, {}, True),
        (429, {"llm_provider-retry-after": "1"}, True),
        (503, {"Retry-After": "2"}, True),
        (503, {"x-ratelimit-reset-requests": "2s"}, True),
        (503, {}, False),  # a 503 without a hint: an endpoint that is down
        (500, {"Retry-After": "2"}, False),
        (502, {}, False),
    ],
)
def test_a_rate_limit_is_a_429_or_a_503_with_a_hint(status, headers, throttled):
    assert rate_limited(status, httpx.Headers(headers)) is throttled


def test_a_spent_quota_is_not_a_rate_limit():
    """OpenAI's 429 for a spent quota: no wait ends it, so maxAttempts counts it."""
    body = (
        b'{"error": {"message": "You exceeded your current quota", '
        b'"type": "insufficient_quota", "code": "insufficient_quota"}}'
    )
    assert rate_limited(429, httpx.Headers({}), body) is False
    assert rate_limited(429, httpx.Headers({}), b'{"error": {"type": "rate_limit_exceeded"}}')
