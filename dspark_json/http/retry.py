"""When to try a request again, and how long to wait first.

Connection errors, bodies cut short, timeouts and the statuses in :data:`RETRY_STATUSES` are
retried with exponential backoff and full jitter, or after the server's ``Retry-After`` /
``retry-after-ms``. What a failure that is not retried looks like is :mod:`.failures`' business.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

__all__ = ["DOWN_STATUSES", "RETRY_STATUSES", "backoff", "retry_after"]

#: Statuses that say the server is overloaded: they are retried (with connection errors, bodies
#: cut short and timeouts), and the in-flight limit backs off.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: Statuses that say this endpoint is down (with connection errors and timeouts).
DOWN_STATUSES = frozenset({502, 503, 504})

_BACKOFF_BASE_S = 0.25
_BACKOFF_CAP_S = 8.0
_RETRY_AFTER_CAP_S = 60.0


def backoff(attempt: int) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2^(attempt-1))]."""
    return random.uniform(0.0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** (attempt - 1)))


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date),
    capped at 60 s; ``None`` when neither is there or readable."""
    if "retry-after-ms" in headers:
        try:
            return min(_RETRY_AFTER_CAP_S, max(0.0, float(headers["retry-after-ms"]) / 1000))
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return min(_RETRY_AFTER_CAP_S, max(0.0, float(value)))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(_RETRY_AFTER_CAP_S, max(0.0, (when - datetime.now(UTC)).total_seconds()))
