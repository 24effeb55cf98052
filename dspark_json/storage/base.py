"""What every store module builds on: :class:`Store` (one object store) and
:class:`StorageSettings` (the settings of one query, its ``repr`` masked). Parsed by
:func:`dspark_json.storage.settings.parse_settings`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from dspark_json.errors import MASK, OptionError, mask_uris

__all__ = ["StorageSettings", "Store", "refuse_userinfo", "split_userinfo"]


def split_userinfo(uri: str) -> tuple[str | None, str]:
    """``scheme://[userinfo@]rest``'s (user info or ``None``, what follows it). The user info
    is in the authority (before the first ``/``: ``s3://bkt/users/a@b.com`` has none), or, where
    the authority holds a ``:`` (``key:secret``), up to the first ``@`` after it: an AWS secret
    key holds a ``/``, often unescaped."""
    rest = uri.split("://", 1)[1] if "://" in uri else uri
    first = rest.split("/", 1)[0]
    if "@" in first:
        userinfo, host = first.rsplit("@", 1)
        return userinfo, host + rest[len(first) :]
    if ":" in first and "@" in rest:
        userinfo, after = rest.split("@", 1)
        return userinfo, after
    return None, rest


def refuse_userinfo(uri: str, store: str, keys: str) -> None:
    """Refuse ``uri`` where it carries a password (``user:secret@``): pyarrow would quote the
    path with it in its errors, and the store reads its credentials from ``keys`` in option
    ``storageOptions`` instead."""
    userinfo, _ = split_userinfo(uri)
    if userinfo is not None and ":" in userinfo:
        raise OptionError(
            f"{store} URL {mask_uris(uri)} carries credentials (user:password@), which {store} "
            f"does not read from a URL: give the URL without them, and the credentials in "
            f"option 'storageOptions' ({keys})."
        )


@dataclass(frozen=True)
class Store:
    """One object store: its name, the URL schemes it accepts, the ``storageOptions`` keys it
    reads (``secret`` ones are never shown; ``plain`` ones are shown as they are), the
    environment variable behind each key, and how its settings become a pyarrow filesystem, the
    options delta-rs takes, and (when credentials are missing) what to set."""

    name: str
    schemes: tuple[str, ...]
    keys: frozenset[str]
    plain: frozenset[str]
    environment: Mapping[str, str]
    #: ``(settings, uri) -> (filesystem, path inside it)``
    filesystem: Callable[[StorageSettings, str], tuple[pafs.FileSystem, str]]
    #: ``settings -> storage_options`` for delta-rs (keys it understands; strings)
    delta_options: Callable[[StorageSettings], dict[str, str]]
    #: Other spellings of keys (``aws_default_region`` -> ``aws_region``), folded on parse.
    aliases: Mapping[str, str] = field(default_factory=dict)
    #: ``settings -> None``, or what is missing and what to set (a quick error at ``.load()``)
    missing: Callable[[StorageSettings], str | None] = field(default=lambda settings: None)
    #: The scheme delta-rs reads this store's URLs by, where one of ``schemes`` means another
    #: backend to it (``gcs://`` is OpenDAL's there, ``gs://`` object_store's):
    #: :func:`dspark_json.storage.delta_uri`.
    delta_scheme: str | None = None


def _shown(key: str, value: str, plain: frozenset[str]) -> str:
    """``value`` as a ``repr`` shows it: a plain key's, unless it may hold a secret (a JSON
    text such as a service account's, an ``@``, a URL that is not ``scheme://host...``)."""
    if key not in plain or value.lstrip().startswith("{") or "@" in value:
        return MASK
    if "://" in value:  # an endpoint
        try:
            parts = urlsplit(value)
            port = f":{parts.port}" if parts.port else ""
        except ValueError:  # not a URL after all (a bad port)
            return MASK
        if not parts.scheme or not parts.hostname:
            return MASK
        return f"{parts.scheme}://{parts.hostname}{port}{parts.path}"
    return value


@dataclass(frozen=True, repr=False)
class StorageSettings:
    """The settings every path of one query is reached with: ``values`` (key -> text, keys
    lower-cased, as the stores spell them), from option ``storageOptions`` (the keys in ``given``)
    over the stores' environment variables, read on the driver when the option was parsed."""

    values: tuple[tuple[str, str], ...] = ()
    given: frozenset[str] = frozenset()
    #: The keys whose values may be shown (a region, a flag, an endpoint without user info).
    plain: frozenset[str] = frozenset()

    def get(self, key: str) -> str | None:
        """The value of ``key``, or ``None``."""
        for name, value in self.values:
            if name == key:
                return value
        return None

    def flag(self, key: str) -> bool:
        """``key`` set to a true value (``true``, ``1``, ``yes``)."""
        return (self.get(key) or "").strip().lower() in ("true", "1", "yes")

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_shown(k, v, self.plain)!r}" for k, v in self.values)
        return f"StorageSettings({shown})"

    __str__ = __repr__
