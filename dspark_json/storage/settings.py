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
import math
import os
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import unquote

import pyarrow.fs as pafs

from dspark_json.errors import OptionError
from dspark_json.storage import azure, gcs, s3
from dspark_json.storage.base import StorageSettings, Store, split_userinfo

__all__ = [
    "ENVIRONMENT_ONLY",
    "STORES",
    "delta_options",
    "delta_uri",
    "filesystem",
    "in_effect",
    "missing_credentials",
    "parse_settings",
    "parsing",
    "store_of",
]

#: The option that carries the settings.
OPTION = "storageOptions"


#: The keys that name an endpoint: a URL, never with user info in it.
_ENDPOINT_KEYS = frozenset({"aws_endpoint_url", "google_base_url", "azure_storage_endpoint"})

#: The stores, by the URL schemes each reads.
STORES: tuple[Store, ...] = (s3.STORE, gcs.STORE, azure.STORE)


def store_of(uri: str) -> Store | None:
    """The store a URI's scheme names (``s3://``, ``gs://``, ``abfss://``...), or ``None``
    (a local path, ``file://``, ``hdfs://``: pyarrow's own)."""
    if "://" not in uri:
        return None
    scheme = uri.split("://", 1)[0].lower()
    for store in STORES:
        if scheme in store.schemes:
            return store
    return None


def _known_keys() -> dict[str, str]:
    """Every spelling a store reads -> the key it folds to."""
    known = {key: key for store in STORES for key in store.keys}
    for store in STORES:
        known.update(store.aliases)
    return known


def parse_settings(
    text: str | None, environ: Mapping[str, str] | None = None, *, name: str = OPTION
) -> StorageSettings:
    """The settings from option ``name``'s JSON object ``text`` (``None``: not given) laid
    over the stores' environment variables in ``environ`` (``os.environ`` by default).
    Raises :class:`OptionError` on text that is not a JSON object of strings, numbers or
    booleans, or on a key no store reads (values never shown)."""
    environ = os.environ if environ is None else environ
    known = _known_keys()
    merged: dict[str, str] = {}
    # under the lock GCS lends GOOGLE_APPLICATION_CREDENTIALS with: not a lent value read
    with gcs.ENVIRONMENT_LOCK:
        for store in STORES:
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
            if folded in given:
                raise OptionError(
                    f"Option {name!r} gives {folded!r} twice (as {key!r} and another spelling): "
                    "keep one."
                )
            if folded in _ENDPOINT_KEYS and split_userinfo(value)[0] is not None:
                raise OptionError(
                    f"Option {name!r}: {key!r} carries user info (user:password@; not shown): "
                    "give the endpoint as scheme://host:port, and the credentials in their own "
                    "keys."
                )
            merged[folded] = value
            given.add(folded)
    plain = frozenset(key for store in STORES for key in store.plain)
    return StorageSettings(tuple(sorted(merged.items())), frozenset(given), plain)


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
            f'\'{{"aws_region": "eu-west-1"}}\'; got a JSON {_json_type(value)}.'
        )
    out: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, bool):
            out[key] = "true" if item else "false"
        elif isinstance(item, float) and not math.isfinite(item):
            raise OptionError(
                f"Option {name!r}: key {key!r} must be a string, number or boolean, got {item}."
            )
        elif isinstance(item, (str, int, float)):
            out[key] = str(item)
        else:
            raise OptionError(
                f"Option {name!r}: key {key!r} must be a string, number or boolean, got a JSON "
                f"{_json_type(item)}."
            )
    return out


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (``null``, not ``NoneType``)."""
    if value is None:
        return "null"
    names = {list: "array", dict: "object", str: "string", bool: "boolean"}
    return names.get(type(value), "number")


#: The settings of a caller that has no query: none, so pyarrow and delta-rs each read the
#: environment variables of the process they run in (S3, GCS). Azure's account name, key and
#: SAS token reach pyarrow only through settings: here the URL must name the account, and
#: pyarrow falls back to Azure's default credential chain.
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
    if store is None:
        return {}
    out = store.delta_options(settings)
    userinfo, _ = split_userinfo(uri)
    if store is s3.STORE and userinfo is not None:  # s3://key:secret@bucket: as pyarrow reads it
        key, _, secret = userinfo.partition(":")
        out.update(aws_access_key_id=unquote(key), aws_secret_access_key=unquote(secret))
        out.pop("aws_session_token", None)  # the environment's belongs to another key
    return out


def delta_uri(uri: str) -> str:
    """``uri`` as delta-rs should be given it: the store's ``delta_scheme`` in place of its
    scheme (the same place), an S3 URI's ``key:secret@`` left out (:func:`delta_options` hands
    it to delta-rs as keys, so pyarrow and delta-rs use the same credentials)."""
    store = store_of(uri)
    if store is None:
        return uri
    scheme = store.delta_scheme or uri.split("://", 1)[0]
    userinfo, rest = split_userinfo(uri)
    if userinfo is not None and store is s3.STORE:  # in delta_options' keys instead
        return f"{scheme}://{rest}"
    return f"{scheme}://{uri.split('://', 1)[1]}"


def missing_credentials(uri: str, settings: StorageSettings) -> str | None:
    """What is missing to reach ``uri``'s store and what to set, or ``None``."""
    store = store_of(uri)
    return None if store is None else store.missing(settings)
