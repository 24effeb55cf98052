"""Option ``requestHeaders``: headers of the user's sent with every request to the endpoints.

For a gateway that routes or schedules by header: llm-d's (the Gateway API inference
extension's) ``x-llm-d-inference-objective`` (an InferenceObjective, whose priority may make
the stream sheddable), ``x-llm-d-inference-fairness-id``, ``x-llm-d-slo-ttft-ms``, or a
gateway's own tenant or routing header. They go with the completions and with every other
request to an endpoint (its ``/v1/models``, ``/metrics``, the checks at ``.load()``): a gateway
that routes by them may route those too.

Checked where the option is read (:func:`request_headers`): a name is an HTTP token, not one of
the headers the client writes itself (:data:`FORBIDDEN`), ``Authorization`` only with option
``allowAuthorizationHeader`` (and then not beside ``apiKey``, ``apiKeyEnv`` or credentials in
an endpoint's URL: :meth:`RequestHeaders.check_authorization`); a value is printable ASCII
(no CR, LF, NUL or other control character, which would end the header or start another).
A value whose name looks like a credential (:func:`looks_secret`: key, token, secret, auth,
cookie, password, session, signature) is a :class:`~dspark_json.http.secrets.Secret`: it
prints as ``***`` in ``repr``, plans and messages.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator

from dspark_json.errors import OptionError
from dspark_json.fs import MASK
from dspark_json.http.secrets import Secret
from dspark_json.rows import load_json

__all__ = [
    "FORBIDDEN",
    "MAX_HEADERS",
    "MAX_HEADERS_BYTES",
    "MAX_HEADER_BYTES",
    "NO_HEADERS",
    "RequestHeaders",
    "looks_secret",
    "request_headers",
]

#: Headers the client writes itself (the body's framing, the connection, the server's name):
#: one given twice would be a request smuggling hazard or a broken request.
FORBIDDEN = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "content-type",
        "content-encoding",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)
#: The most headers option ``requestHeaders`` takes, the bytes of one (name, value, ": " and
#: the line's end: nginx's default buffer for a header line is 8 KiB), and of all of them
#: (uvicorn's h11 reads 16 KiB of a request's head before it gives up; nginx 32 KiB).
MAX_HEADERS = 100
MAX_HEADER_BYTES = 8192
MAX_HEADERS_BYTES = 12288
#: Headers that carry credentials to the server: only where the user asks for them.
_AUTHORIZATION = frozenset({"authorization", "proxy-authorization"})
#: An HTTP token (RFC 9110's ``tchar``).
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: Words that make a header's value a credential (masked wherever options are shown).
_SECRET_WORDS = re.compile(r"key|token|secret|auth|cookie|passw|session|signature|credential")


def looks_secret(name: str) -> bool:
    """Whether a header named ``name`` likely carries a credential."""
    return _SECRET_WORDS.search(name.lower()) is not None


_Items = tuple[tuple[str, str | Secret], ...]


class RequestHeaders:
    """The headers of option ``requestHeaders``, in the order given; credential-looking values
    kept as secrets (its ``repr`` masks them)."""

    __slots__ = ("_items",)

    def __init__(self, items: _Items = ()) -> None:
        self._items = items

    def sent(self) -> dict[str, str]:
        """The headers as sent (lower-case names, the values revealed)."""
        return {
            name.lower(): value.reveal() if isinstance(value, Secret) else value
            for name, value in self._items
        }

    def secrets(self) -> Iterator[Secret]:
        """The values masked in every text (an echo of one in an error is masked too)."""
        return (v for _, v in self._items if isinstance(v, Secret))

    def route(self) -> str:
        """A digest of what the headers may route by (names, and the values that are not
        credentials: those count by name only), so that two queries whose headers send them to
        different backends of one gateway do not share a ``/metrics`` reading or its room
        (:mod:`.readings`); ``""`` without headers. No credential goes into it."""
        if not self._items:
            return ""
        shown = sorted((n.lower(), "" if isinstance(v, Secret) else v) for n, v in self._items)
        return hashlib.sha256(json.dumps(shown).encode("utf-8")).hexdigest()[:16]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name.lower() for name, _ in self._items)

    def check_authorization(self, *, allowed: bool, other: str | None) -> None:
        """Raise :class:`OptionError` where an ``Authorization`` header is given without option
        ``allowAuthorizationHeader`` (``allowed``), or beside another source of credentials
        (``other``: the option that gives them)."""
        for name in (n for n in self.names if n in _AUTHORIZATION):
            if not allowed:
                raise OptionError(
                    f"Option 'requestHeaders' sets header {name!r}, which sends credentials: "
                    "give the key with option 'apiKeyEnv' (or 'apiKey'), or set option "
                    "'allowAuthorizationHeader' to true to send this header as given."
                )
            if other is not None and name == "authorization":
                raise OptionError(
                    f"Option 'requestHeaders' sets header {name!r} and option {other!r} gives "
                    "credentials too (sent as Authorization): keep only one of them."
                )

    def __bool__(self) -> bool:
        return bool(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RequestHeaders) and other._items == self._items

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        shown = {name: MASK if isinstance(v, Secret) else v for name, v in self._items}
        return f"RequestHeaders({shown!r})"

    __str__ = __repr__

    def __reduce__(self) -> tuple[type[RequestHeaders], tuple[_Items]]:
        return (RequestHeaders, (self._items,))


NO_HEADERS = RequestHeaders()


def request_headers(name: str, text: str) -> RequestHeaders:
    """Option ``requestHeaders``: a JSON object of header names to values (strings, or numbers
    written as they are), checked; its errors name the header, never a value."""
    if not text.strip():
        return NO_HEADERS
    example = '{"x-llm-d-inference-objective": "batch-sheddable"}'

    def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
        for index, (header, _) in enumerate(pairs):  # json.loads keeps the last of a name
            if any(header == earlier for earlier, _ in pairs[:index]):
                raise OptionError(
                    f"Option {name!r}: header {header[:60]!r} is given twice. Keep one."
                )
        return dict(pairs)

    try:
        value = load_json(text, object_pairs_hook=unique)
    except OptionError:
        raise
    except (json.JSONDecodeError, ValueError):
        # The text itself is not shown: it may hold a credential.
        raise OptionError(
            f"Option {name!r} must be a JSON object of header names to values, e.g. "
            f"'{example}'; its text is not valid JSON (not shown: it may hold a credential)."
        ) from None
    if not isinstance(value, dict):
        raise OptionError(
            f"Option {name!r} must be a JSON object of header names to values, e.g. "
            f"'{example}'; got a JSON {type(value).__name__}."
        )
    items: list[tuple[str, str | Secret]] = []
    seen: set[str] = set()
    if len(value) > MAX_HEADERS:
        raise OptionError(
            f"Option {name!r} gives {len(value)} headers: {MAX_HEADERS} at most (servers and "
            "gateways refuse a request with many more). Send only the ones the gateway reads."
        )
    total = 0
    for header, raw in value.items():
        items.append((_checked_name(name, header, seen), _checked_value(name, header, raw)))
        size = len(header) + len(str(raw)) + 4
        total += size
        if size > MAX_HEADER_BYTES or total > MAX_HEADERS_BYTES:
            raise OptionError(
                f"Option {name!r}: header {header!r} makes the headers too long to send "
                f"(a header {MAX_HEADER_BYTES} bytes at most, all {MAX_HEADERS_BYTES}: servers "
                "and gateways close the connection on longer ones, which would read as a server "
                "that cannot be reached). Shorten the value (not shown)."
            )
    return RequestHeaders(tuple(items))


def _checked_name(option: str, header: str, seen: set[str]) -> str:
    shown = header if _TOKEN.fullmatch(header) else repr(header[:60])
    if not _TOKEN.fullmatch(header):
        raise OptionError(
            f"Option {option!r}: header name {shown} is not a valid HTTP header name (letters, "
            "digits and !#$%&'*+.^_`|~- only, no spaces, colons or line breaks). Fix the name."
        )
    lower = header.lower()
    if lower in FORBIDDEN:
        raise OptionError(
            f"Option {option!r}: header {header!r} is written by the client itself (the "
            "request's framing, connection or server name). Leave it out."
        )
    if lower in seen:
        raise OptionError(
            f"Option {option!r}: header {header!r} is given twice (names are case-insensitive). "
            "Keep one."
        )
    seen.add(lower)
    return header


def _checked_value(option: str, header: str, raw: object) -> str | Secret:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise OptionError(
            f"Option {option!r}: header {header!r} must have a string (or number) value, got a "
            f"JSON {type(raw).__name__}. Write the value as a string."
        )
    if isinstance(raw, float) and not math.isfinite(raw):
        raise OptionError(
            f"Option {option!r}: header {header!r} has a number that is not finite (NaN or "
            "Infinity). Write the value as a string."
        )
    value = raw if isinstance(raw, str) else json.dumps(raw)
    for position, char in enumerate(value, start=1):
        if char == "\t" or " " <= char <= "~":
            continue
        kind = (
            "a line break (CR or LF), which would end the header and start another"
            if char in "\r\n"
            else "a NUL or other control character"
            if ord(char) < 0x80
            else "a non-ASCII character"
        )
        raise OptionError(
            f"Option {option!r}: the value of header {header!r} cannot be sent: character "
            f"{position} is {kind} (the value is not shown). Give printable ASCII only."
        )
    value = value.strip(" \t")
    return Secret(value) if looks_secret(header) else value
