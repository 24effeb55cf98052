"""The storage settings of one query, and the stores that read them.

A :class:`StorageSettings` is built once on the driver from option ``storageOptions`` (a JSON
object, keys as delta-rs and object_store spell them: ``aws_access_key_id``...) laid over the
standard environment variables (``AWS_ACCESS_KEY_ID``...), and travels to the executors with the
pickled options: no process-global state, so two queries in one process may use two stores.
Its ``repr`` masks every value but the harmless ones (a region, a flag).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from dspark_json.errors import OptionError

__all__ = [
    "ENVIRONMENT_ONLY",
    "StorageSettings",
    "Store",
    "delta_options",
    "delta_uri",
    "filesystem",
    "in_effect",
    "missing_credentials",
    "parsing",
    "store_of",
]

MASK = "***"
#: The option that carries the settings.
OPTION = "storageOptions"


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
    #: backend to it (``gcs://`` is OpenDAL's there, ``gs://`` object_store's): see
    #: :func:`delta_uri`.
    delta_scheme: str | None = None


def _stores() -> tuple[Store, ...]:
    from dspark_json.storage import azure, gcs, s3

    return (s3.STORE, gcs.STORE, azure.STORE)


def store_of(uri: str) -> Store | None:
    """The store a URI's scheme names (``s3://``, ``gs://``, ``abfss://``...), or ``None``
    (a local path, ``file://``, ``hdfs://``: pyarrow's own)."""
    if "://" not in uri:
        return None
    scheme = uri.split("://", 1)[0].lower()
    for store in _stores():
        if scheme in store.schemes:
            return store
    return None


def _known_keys() -> dict[str, str]:
    """Every spelling a store reads -> the key it folds to."""
    known = {key: key for store in _stores() for key in store.keys}
    for store in _stores():
        known.update(store.aliases)
    return known


def _shown(key: str, value: str, plain: frozenset[str]) -> str:
    if key not in plain:
        return MASK
    if "://" in value:  # an endpoint: its user info hidden
        parts = urlsplit(value)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"
    return value


@dataclass(frozen=True, repr=False)
class StorageSettings:
    """The settings every path of one query is reached with: ``values`` (key -> text, keys
    lower-cased, as the stores spell them), from option ``storageOptions`` (the keys in ``given``)
    over the stores' environment variables, read on the driver when the option was parsed."""

    values: tuple[tuple[str, str], ...] = ()
    given: frozenset[str] = frozenset()

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
        plain = frozenset(k for store in _stores() for k in store.plain)
        shown = ", ".join(f"{k}={_shown(k, v, plain)!r}" for k, v in self.values)
        return f"StorageSettings({shown})"

    __str__ = __repr__

    @classmethod
    def parse(
        cls, text: str | None, environ: Mapping[str, str] | None = None, *, name: str = OPTION
    ) -> StorageSettings:
        """The settings from option ``name``'s JSON object ``text`` (``None``: not given) laid
        over the stores' environment variables in ``environ`` (``os.environ`` by default).
        Raises :class:`OptionError` on text that is not a JSON object of strings, numbers or
        booleans, or on a key no store reads (values never shown)."""
        environ = os.environ if environ is None else environ
        known = _known_keys()
        merged: dict[str, str] = {}
        for store in _stores():
            for variable, key in store.environment.items():
                value = environ.get(variable)
                if value and key not in merged:  # the first variable of a key wins
                    merged[key] = value
        given: set[str] = set()
        if text is not None and text.strip():
            for key, value in _parse_object(name, text).items():
                folded = known.get(key.strip().lower(), "")
                if not folded:
                    raise OptionError(
                        f"Option {name!r} has key {key!r}, which no store reads. Known keys: "
                        f"{', '.join(sorted(known))} (values are never shown)."
                    )
                merged[folded] = value
                given.add(folded)
        return cls(tuple(sorted(merged.items())), frozenset(given))


def _parse_object(name: str, text: str) -> dict[str, str]:
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"Option {name!r} must be a JSON object of store settings, e.g. "
            f'\'{{"aws_region": "eu-west-1", "aws_access_key_id": "..."}}\'; {exc.msg} at column '
            f"{exc.colno} (the text is not shown: it may hold a secret)."
        ) from None
    if not isinstance(value, dict):
        raise OptionError(
            f"Option {name!r} must be a JSON object of store settings, e.g. "
            f'\'{{"aws_region": "eu-west-1"}}\'; got a JSON {type(value).__name__}.'
        )
    out: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, bool):
            out[key] = "true" if item else "false"
        elif isinstance(item, (str, int, float)):
            out[key] = str(item)
        else:
            raise OptionError(
                f"Option {name!r}: key {key!r} must be a string, number or boolean, got a JSON "
                f"{type(item).__name__}."
            )
    return out


#: The settings of a caller that has no query: none, so pyarrow and delta-rs each read the
#: environment variables of the process they run in.
ENVIRONMENT_ONLY = StorageSettings()


#: The settings of the options being parsed (:func:`parsing`), for an option whose converter
#: reads a file (a tools file, a JSON Schema file): scoped to that call, on its thread.
_PARSING: ContextVar[StorageSettings | None] = ContextVar("dspark_json_storage", default=None)


@contextlib.contextmanager
def parsing(settings: StorageSettings) -> Iterator[None]:
    """While the options of one query are parsed: :func:`in_effect` is ``settings``."""
    token = _PARSING.set(settings)
    try:
        yield
    finally:
        _PARSING.reset(token)


def in_effect() -> StorageSettings:
    """The settings of the options being parsed (:func:`parsing`), else
    :data:`ENVIRONMENT_ONLY`. Only option converters read it: everything else is handed the
    query's settings."""
    return _PARSING.get() or ENVIRONMENT_ONLY


def filesystem(uri: str, settings: StorageSettings) -> tuple[pafs.FileSystem, str] | None:
    """The filesystem of an object store URI built from ``settings`` and the path inside it;
    ``None`` where no store here reads the scheme (pyarrow resolves it alone)."""
    store = store_of(uri)
    return None if store is None else store.filesystem(settings, uri)


def delta_options(uri: str, settings: StorageSettings) -> dict[str, str]:
    """The ``storage_options`` delta-rs takes for the table at ``uri`` (empty off the stores)."""
    store = store_of(uri)
    return {} if store is None else store.delta_options(settings)


def delta_uri(uri: str) -> str:
    """``uri`` as delta-rs should be given it: the store's :attr:`Store.delta_scheme` in place
    of its scheme (the same place), else ``uri`` as it is."""
    store = store_of(uri)
    if store is None or store.delta_scheme is None:
        return uri
    return f"{store.delta_scheme}://{uri.split('://', 1)[1]}"


def missing_credentials(uri: str, settings: StorageSettings) -> str | None:
    """What is missing to reach ``uri``'s store and what to set, or ``None``."""
    store = store_of(uri)
    return None if store is None else store.missing(settings)
