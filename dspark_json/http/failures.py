"""What a request that failed for good leaves in its row's ``_error``.

Every record is a :class:`~dspark_json.rows.RowError` built by
:func:`~dspark_json.rows.row_error`. Every message passes through
:func:`~dspark_json.http.secrets.redact` before it is cut to length: a server may echo the key
back, and a transport error's text may carry the URL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import httpx

from dspark_json.http.secrets import Secret, redact
from dspark_json.http.transport import BodyRefused, BodyTooLarge, HeadersTooLarge
from dspark_json.rows import RowError, row_error

__all__ = [
    "MESSAGE_CHARS",
    "body_error",
    "budget_error",
    "held_error",
    "http_error",
    "invalid_utf8_error",
    "model_unavailable_error",
    "no_endpoint_error",
    "transport_error",
]

#: The longest ``_error.message`` kept (after masking).
MESSAGE_CHARS = 500


def http_error(
    status: int, content: bytes, attempts: int, secrets: Iterable[Secret | None] = ()
) -> RowError:
    """An error record from either of vLLM's error shapes: ``{"error": {...}}`` or the flat
    ``{"object": "error", "message", "type", ...}``; the body's start where it is neither."""
    text = content.decode("utf-8", errors="replace")
    kind, message = f"http_{status}", text
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict):
        nested = body.get("error")
        detail: dict[str, Any] = nested if isinstance(nested, dict) else body
        if isinstance(nested, str):  # {"error": "text"}, as some gateways send
            detail = {"message": nested}
        kind = str(detail.get("type") or kind)
        message = str(detail.get("message") or message)
    return row_error(
        status=status,
        type=redact(kind, secrets)[:MESSAGE_CHARS],
        message=_shown(message, secrets),
        attempts=attempts,
    )


def transport_error(
    exc: Exception, attempts: int, timeout: float, secrets: Iterable[Secret | None] = ()
) -> RowError:
    """An error record for a connection error, a body cut short or a timeout."""
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        kind = "connect_timeout" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
        message = (
            f"no connection within connectTimeout ({exc})"
            if kind == "connect_timeout"
            else f"no complete response within requestTimeout={timeout:g}s / readTimeout"
        )
        return row_error(
            status=None, type=kind, message=_shown(message, secrets), attempts=attempts
        )
    # Keep the reason, never the URL (it may hold credentials).
    reason = str(exc).split(" for url ", 1)[0] or type(exc).__name__
    return row_error(
        status=None, type=type(exc).__name__, message=_shown(reason, secrets), attempts=attempts
    )


def held_error(deadline: float, attempts: int) -> RowError:
    """An error record for a request held back (option ``maxServerQueue``) until its
    ``requestDeadline`` was spent: nothing was sent for it."""
    return row_error(
        status=None,
        type="timeout",
        message=(
            f"held back until requestDeadline={deadline:g}s was spent: every reading of the "
            "endpoint's /metrics showed it saturated (option 'maxServerQueue'); nothing was sent"
        ),
        attempts=attempts,
    )


def budget_error(deadline: float, attempts: int) -> RowError:
    """An error record for a request held back by options maxTokensPerMinute or
    maxTokensInFlight (:mod:`.tokens`) until its ``requestDeadline`` was spent."""
    return row_error(
        status=None,
        type="timeout",
        message=(
            f"held back until requestDeadline={deadline:g}s was spent: the token budget "
            "(options 'maxTokensPerMinute', 'maxTokensInFlight') had no room for it; nothing "
            "more was sent. Raise the budget or requestDeadline, or send fewer prompts a batch"
        ),
        attempts=attempts,
    )


def body_error(exc: BodyRefused, attempts: int) -> RowError:
    """A body refused as it was read: over option ``maxResponseBytes`` (type
    ``response_too_large``), a head of endless header lines (``headers_too_large``), or not
    decodable from its ``Content-Encoding``."""
    if isinstance(exc, BodyTooLarge):
        return row_error(
            status=exc.status,
            type="response_too_large",
            message=(
                f"{exc}, the limit set by maxResponseBytes={exc.limit}; the rest was not read. "
                "Raise maxResponseBytes if such answers are expected (fewer choices, logprobs "
                "or max_tokens make them smaller)."
            ),
            attempts=attempts,
        )
    if isinstance(exc, HeadersTooLarge):
        return row_error(
            status=exc.status,
            type="headers_too_large",
            message=f"{exc}; the rest was not read (a server or proxy that misbehaves)",
            attempts=attempts,
        )
    return row_error(status=exc.status, type="DecodingError", message=str(exc), attempts=attempts)


def invalid_utf8_error(exc: UnicodeDecodeError, attempts: int) -> RowError:
    """A 200 answer whose body is not UTF-8 (its text, each bad byte as ``\\xNN``, is the row's
    ``_corrupt_record``)."""
    return row_error(
        status=200,
        type="invalid_utf8",
        message=(
            f"the response body is not valid UTF-8 ({exc.reason} at byte {exc.start}); "
            "_corrupt_record holds it with each invalid byte written as \\xNN"
        ),
        attempts=attempts,
    )


def no_endpoint_error(
    urls: Iterable[str],
    deadline: float,
    last: RowError | None,
    attempts: int,
    secrets: Iterable[Secret | None] = (),
) -> RowError:
    """Every endpoint rested until the prompt's deadline (``last``: the error before that)."""
    reason = f"; last error: {last['type']}: {last['message']}" if last else ""
    return row_error(
        status=last["status"] if last else None,
        type="endpoint_unavailable",
        message=_shown(
            f"no endpoint ({', '.join(urls)}) was healthy within requestDeadline={deadline:g}s"
            f"{reason}",
            secrets,
        ),
        attempts=attempts,
    )


def model_unavailable_error(
    model: str,
    *,
    served: str,
    deadline: float,
    last: RowError | None,
    attempts: int,
    secrets: Iterable[Secret | None] = (),
) -> RowError:
    """No endpoint served ``model`` until the prompt's deadline (``served``: what each endpoint
    lists; ``last``: the error before, where a replica that served it failed)."""
    reason = f"; last error: {last['type']}: {last['message']}" if last else ""
    return row_error(
        status=last["status"] if last else None,
        type="model_unavailable",
        message=_shown(
            f"no endpoint served model {model!r} within requestDeadline={deadline:g}s (what "
            f"the endpoints list at /v1/models: {served}){reason}. Start a replica that serves "
            "it, add one to option 'endpointsFile', or fix the prompt's 'model'",
            secrets,
        ),
        attempts=attempts,
    )


def _shown(message: str, secrets: Iterable[Secret | None]) -> str:
    """Masked first, then cut: a cut never leaves part of a credential behind."""
    return redact(message, secrets)[:MESSAGE_CHARS]
