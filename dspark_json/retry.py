"""When and how long to wait before trying a request again, and what a failure looks like.

Error records have the ``_error`` column's shape: ``status`` (HTTP status or null), ``type``,
``message`` and ``attempts``. Every message passes through :func:`~dspark_json.secrets.redact`:
a server may echo the key back, and a transport error's text may carry the URL.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from dspark_json.secrets import Secret, redact

__all__ = ["backoff", "http_error", "retry_after", "transport_error"]

_BACKOFF_BASE_S = 0.25
_BACKOFF_CAP_S = 8.0
_RETRY_AFTER_CAP_S = 60.0
_MESSAGE_CHARS = 500


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


def http_error(
    status: int, content: bytes, attempts: int, secrets: Iterable[Secret | None] = ()
) -> dict[str, Any]:
    """An error record from either of vLLM's error shapes: ``{"error": {...}}`` or the flat
    ``{"object": "error", "message", "type", ...}``; the body's start where it is neither."""
    text = content.decode("utf-8", errors="replace")
    kind, message = f"http_{status}", text[:_MESSAGE_CHARS]
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        nested = body.get("error")
        detail: dict[str, Any] = nested if isinstance(nested, dict) else body
        if isinstance(nested, str):  # {"error": "text"}, as some gateways send
            detail = {"message": nested}
        kind = str(detail.get("type") or kind)
        message = str(detail.get("message") or message)[:_MESSAGE_CHARS]
    return {
        "status": status,
        "type": kind,
        "message": redact(message, secrets),
        "attempts": attempts,
    }


def transport_error(
    exc: Exception, attempts: int, timeout: float, secrets: Iterable[Secret | None] = ()
) -> dict[str, Any]:
    """An error record for a connection error, a body cut short or a timeout."""
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        kind = "connect_timeout" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
        message = (
            f"no connection within connectTimeout ({exc})"
            if kind == "connect_timeout"
            else f"no complete response within requestTimeout={timeout:g}s / readTimeout"
        )
        return {"status": None, "type": kind, "message": message, "attempts": attempts}
    # Keep the reason, never the URL (it may hold credentials).
    reason = str(exc).split(" for url ", 1)[0] or type(exc).__name__
    return {
        "status": None,
        "type": type(exc).__name__,
        "message": redact(reason, secrets),
        "attempts": attempts,
    }
