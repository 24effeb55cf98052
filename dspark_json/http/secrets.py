"""Credentials: the API key and the user:password of an endpoint URL, kept out of every text.

A :class:`Secret` prints as ``'***'`` in ``repr``/``str``/f-strings, so an ``Options`` object, a
log line or an exception cannot show it by accident; only :meth:`Secret.reveal` gives the value,
and only the code that builds the ``Authorization`` header calls it. :func:`redact` scrubs known
secrets and URL credentials from text that came from elsewhere (a server's error message may echo
the key back). A key is checked where it is read (the option on the driver, the environment
variable on the driver and on each executor) by :func:`check_header_value`: a key that is not a
legal header value would otherwise inject headers, or fail with an error that quotes it.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from dspark_json.errors import MASK, OptionError, mask_uris

__all__ = [
    "MASK",
    "REDACTION_PATTERN",
    "ApiKey",
    "MaskingFilter",
    "Secret",
    "check_header_value",
    "redact",
    "split_credentials",
]

#: Added to ``spark.sql.redaction.options.regex`` by :func:`dspark_json.register`: option names
#: that hold a key, a store's settings (``storageOptions``) or request headers (``requestHeaders``:
#: credential-looking values), and any value with credentials in
#: a URL. Spark's default, ``(?i)url``,
#: matches neither, and a streaming DataFrame's ``explain()`` prints every option of the source.
REDACTION_PATTERN = (
    r"(?i:apikey|api_key|storageoptions|storage_options|requestheaders|request_headers)|://[^\s]*@|"
    r"(?i:[?&;](?:sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|token|access_token|sas_token|key|"
    r"api_key|apikey|access_key|secret_key|secret|password|passwd|pwd)=)"
)
#: Passwords shorter than this are not masked on their own (they would mask common words).
_MIN_PART_CHARS = 4


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
        """The key, or ``None`` where the variable is unset (the caller says so).

        Raises :class:`OptionError` (naming the option or the variable, never the value) when
        the key cannot be sent as a header value. Surrounding whitespace of the variable is
        dropped: a key file mounted as an environment variable often ends with a newline."""
        if self.value is not None:
            check_header_value(self.value, "Option 'apiKey'")
            return self.value
        if self.env is not None and os.environ.get(self.env, "").strip():
            key = Secret(os.environ[self.env].strip())
            where = f"The environment variable {self.env!r} (option 'apiKeyEnv')"
            check_header_value(key, where, fix=f"Set {self.env} to the key alone.")
            return key
        return None


def check_header_value(
    secret: Secret, where: str, *, fix: str = "Give the key alone, without spaces or line breaks."
) -> None:
    """Raise :class:`OptionError` unless ``secret`` is a legal ``Authorization`` token: printable
    ASCII without spaces (RFC 6750's token characters and a few more). ``where`` names its
    origin (``"Option 'apiKey'"``); the message says which kind of character is wrong and
    where, never the value."""
    for position, char in enumerate(secret.reveal(), start=1):
        if "!" <= char <= "~":
            continue
        kind = (
            "a line break (CR or LF), which would start a new header"
            if char in "\r\n"
            else "a space or tab"
            if char in " \t"
            else "a control character"
            if ord(char) < 0x80
            else "a non-ASCII character"
        )
        raise OptionError(
            f"{where} cannot be sent in an HTTP header: character {position} is {kind} (the "
            f"value is not shown). {fix}"
        )


def split_credentials(url: str) -> tuple[str, Secret | None]:
    """``http://user:pass@host`` -> (``http://host``, the ``user:pass`` as a secret), each part
    percent-decoded as URLs require (``p%40ss`` is the password ``p@ss``)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    try:
        decoded = ":".join(unquote(part, errors="strict") for part in userinfo.split(":", 1))
    except UnicodeDecodeError:
        raise OptionError(
            "The credentials in option 'endpoint' are not valid UTF-8 once percent-decoded (the "
            "value is not shown). Percent-encode the UTF-8 bytes of the user and password."
        ) from None
    return urlunsplit(parts._replace(netloc=host)), Secret(decoded)


def redact(text: str, secrets: Iterable[Secret | None] = ()) -> str:
    """``text`` with every given secret, in every form it takes on the wire (as is, as the
    base64 of Basic auth, percent-encoded), and the credentials of any URI in it (``user:pass@``,
    ``sig=`` and the like: :func:`dspark_json.fs.mask_uris`) replaced by ``***``.

    Mask before cutting a text to length: a cut first can leave part of a secret behind.
    """
    for secret in secrets:
        if secret is None or not secret.reveal():
            continue
        for form in _wire_forms(secret.reveal()):
            text = text.replace(form, MASK)
    return mask_uris(text)


def _wire_forms(value: str) -> list[str]:
    """A secret as it may come back from a server: as is, in a JSON string, in a Python repr,
    percent-encoded (whole, or as ``user:password``), as the base64 of Basic auth (standard or
    URL-safe, padded or not); a URL password also alone. Longest first, so none masks part of
    another."""
    raw = value.encode("utf-8", "surrogatepass")
    escaped = json.dumps(value, ensure_ascii=False)[1:-1]
    forms = {
        value,
        escaped,
        escaped.replace("/", "\\/"),  # JSON lets "/" be escaped, and some servers do
        repr(value)[1:-1],
        quote(value, safe=""),
    }
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        token = encode(raw).decode("ascii")
        forms |= {token, token.rstrip("=")}
    user, colon, password = value.partition(":")
    if colon:
        forms.add(f"{quote(user, safe='')}:{quote(password, safe='')}")
        if len(password) >= _MIN_PART_CHARS:
            forms |= {password, quote(password, safe="")}
    return sorted(forms, key=len, reverse=True)


class MaskingFilter(logging.Filter):
    """Masks the credentials of any URI in a record of the ``dspark_json`` logger (a directory
    option's ``s3://user:secret@``, a SAS ``sig=``), whichever line logs it: installed on that
    logger when this module is imported, which every query's options do."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_uris(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def _install_filter() -> None:
    logger = logging.getLogger("dspark_json")
    if not any(isinstance(f, MaskingFilter) for f in logger.filters):
        logger.addFilter(MaskingFilter())


_install_filter()
