"""When to try a request again, and how long to wait first.

Connection errors, bodies cut short, timeouts and the statuses in :data:`RETRY_STATUSES` are
retried with exponential backoff and full jitter, or after the server's retry hint
(:func:`retry_after`: ``retry-after-ms``, ``Retry-After``, LiteLLM's
``llm_provider-retry-after``, OpenAI's ``x-ratelimit-reset-*``). A rate limit
(:func:`rate_limited`) is retried until ``requestDeadline`` rather than ``maxAttempts`` times:
the server says when to come back, and a rate-limited run should finish, not end half its rows
as 429s. What a failure that is not retried looks like is :mod:`.failures`' business.
"""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

__all__ = [
    "DOWN_STATUSES",
    "QUOTA_SPENT",
    "RATE_LIMIT_MIN_WAIT_S",
    "RETRY_STATUSES",
    "backoff",
    "rate_limited",
    "retry_after",
    "retry_hint",
]

#: Statuses that say the server is overloaded: they are retried (with connection errors, bodies
#: cut short and timeouts), and the in-flight limit backs off.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: Statuses that say this endpoint is down (with connection errors and timeouts).
DOWN_STATUSES = frozenset({502, 503, 504})

_BACKOFF_BASE_S = 0.25
_BACKOFF_CAP_S = 8.0
_RETRY_AFTER_CAP_S = 60.0
#: The shortest wait before retrying a rate limit: it is not counted against ``maxAttempts``, so
#: a hint of 0 (``Retry-After: 0``, a past date, ``x-ratelimit-reset-requests: 0s``) would
#: otherwise resend at once, thousands of times a second per row, until ``requestDeadline``.
RATE_LIMIT_MIN_WAIT_S = 0.1


def backoff(attempt: int) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2^(attempt-1))]."""
    return random.uniform(0.0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** (attempt - 1)))


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from the server's retry hint, capped at 60 s; ``None`` when there is none
    readable. In this order: ``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date),
    LiteLLM's ``llm_provider-retry-after`` (the provider's Retry-After, in seconds), then
    OpenAI's ``x-ratelimit-reset-requests`` / ``x-ratelimit-reset-tokens`` (durations such as
    ``1s``, ``6m0s``, ``20ms``: the longer of the two, as either limit may be the one hit)."""
    if "retry-after-ms" in headers:
        try:
            return _capped(float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is not None:
        seconds = _seconds_or_date(value)
        if seconds is not None:
            return seconds
    value = headers.get("llm_provider-retry-after")
    if value is not None:
        seconds = _seconds_or_date(value)
        if seconds is not None:
            return seconds
    resets = [
        _duration(headers[name])
        for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
        if name in headers
    ]
    known = [r for r in resets if r is not None]
    return _capped(max(known)) if known else None


def retry_hint(headers: httpx.Headers, throttle: bool) -> float | None:
    """:func:`retry_after`, and for a rate limit (``throttle``: :func:`rate_limited`) at least
    :data:`RATE_LIMIT_MIN_WAIT_S`."""
    hint = retry_after(headers)
    return max(hint, RATE_LIMIT_MIN_WAIT_S) if throttle and hint is not None else hint


#: What a 429 says when the account's quota is spent (OpenAI's error code): no wait ends it,
#: so it is counted against ``maxAttempts`` like any other failure.
QUOTA_SPENT = b"insufficient_quota"


def rate_limited(status: int, headers: httpx.Headers, body: bytes = b"") -> bool:
    """Whether an answer is a rate limit that is retried until ``requestDeadline`` (not counted
    against ``maxAttempts``): a 429, or a 503 that says when to come back (a gateway's
    throttling; a 503 without a hint is an endpoint that is down). A 429 whose ``body`` says
    the quota is spent (:data:`QUOTA_SPENT`) is not one: retrying it until the deadline would
    hold every row for ``requestDeadline`` and then fail it anyway."""
    if QUOTA_SPENT in body[:4096]:
        return False
    return status == 429 or (status == 503 and retry_after(headers) is not None)


def _capped(seconds: float) -> float:
    return min(_RETRY_AFTER_CAP_S, max(0.0, seconds))


def _seconds_or_date(value: str) -> float | None:
    """A Retry-After value: seconds, or an HTTP date (a past one means now)."""
    try:
        return _capped(float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return _capped((when - datetime.now(UTC)).total_seconds())


#: One part of a Go-style duration (OpenAI's reset headers): a number and its unit.
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _duration(text: str) -> float | None:
    """Seconds in a duration such as ``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s`` (a bare number is
    seconds); ``None`` where it is not one."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)
