"""Credentials: the API key and the user:password of an endpoint URL, kept out of every text.

A :class:`Secret` prints as ``'***'`` in ``repr``/``str``/f-strings, so an ``Options`` object, a
log line or an exception cannot show it by accident; only :meth:`Secret.reveal` gives the value,
and only the code that builds the ``Authorization`` header calls it. :func:`redact` scrubs known
secrets and URL credentials from text that came from elsewhere (a server's error message may echo
the key back).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = ["MASK", "ApiKey", "Secret", "redact", "split_credentials"]

MASK = "***"
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


class Secret:
    """A string that never prints."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        # Pickled to the executors with the reader: the value must travel, the text must not.
        return (Secret, (self._value,))


@dataclass(frozen=True)
class ApiKey:
    """Where the API key comes from: the key itself, or an environment variable named by
    option ``apiKeyEnv`` and read where the request is sent (on the executors)."""

    value: Secret | None = None
    env: str | None = None

    def resolve(self) -> Secret | None:
        """The key, or ``None`` where the variable is unset (the caller says so)."""
        if self.value is not None:
            return self.value
        if self.env is not None and os.environ.get(self.env):
            return Secret(os.environ[self.env])
        return None


def split_credentials(url: str) -> tuple[str, Secret | None]:
    """``http://user:pass@host`` -> (``http://host``, the ``user:pass`` as a secret)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=host)), Secret(userinfo)


def redact(text: str, secrets: Iterable[Secret | None] = ()) -> str:
    """``text`` with every given secret, in every form it takes on the wire (as is, as the
    base64 of Basic auth, percent-encoded), and any ``scheme://user:pass@`` replaced by ``***``.

    Mask before cutting a text to length: a cut first can leave part of a secret behind.
    """
    for secret in secrets:
        if secret is None or not secret.reveal():
            continue
        for form in _wire_forms(secret.reveal()):
            text = text.replace(form, MASK)
    return _URL_CREDENTIALS.sub(rf"\1{MASK}@", text)


def _wire_forms(value: str) -> list[str]:
    """A secret as it may come back from a server: longest first, so none masks part of
    another."""
    raw = value.encode("utf-8", "surrogatepass")
    forms = {
        value,
        base64.b64encode(raw).decode("ascii"),
        base64.b64encode(raw).decode("ascii").rstrip("="),
        quote(value, safe=""),
    }
    return sorted(forms, key=len, reverse=True)
