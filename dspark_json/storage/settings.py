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
import re
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
                    f"Option {name!r} has key {_shown_key(key)}, which no store reads. Known "
                    f"keys: {', '.join(sorted(known))} (values are never shown)."
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


#: The longest ``storageOptions`` text read: a store's settings are a few keys (an inline
#: service account key, the longest value, is about 2.5 KB).
MAX_TEXT_CHARS = 1 << 20
#: The most digits of a number value: no store setting is a longer number, and Python refuses
#: to turn more than 4,300 digits into an int.
MAX_NUMBER_DIGITS = 64
#: A key no store reads is shown in the message only when it reads as a setting's name: at most
#: this long, words of letters in one case (or capitalised), each perhaps ending in digits,
#: joined by ``_``, ``.`` or ``-``, no word longer than 24 letters. Anything else (a secret
#: pasted as a key: ``AKIA...``, a base64 token, a URL) is described, never shown.
_MAX_KEY_SHOWN = 64
_KEY_NAME = re.compile(
    r"(?:[a-z]{1,24}|[A-Z][a-z]{0,23}|[A-Z]{1,24})[0-9]{0,3}"
    r"(?:[_.-](?:[a-z]{1,24}|[A-Z][a-z]{0,23}|[A-Z]{1,24})?[0-9]{0,3})*"
)


def _shown_key(key: str) -> str:
    """An unknown key as a message shows it: quoted where it reads as a setting's name, else
    only its length (it may be a secret pasted in the wrong place)."""
    if len(key) <= _MAX_KEY_SHOWN and _KEY_NAME.fullmatch(key):
        return repr(key)
    return (
        f"of {len(key)} character(s) (not shown: it does not read as a setting's name, and may "
        "be a secret pasted as a key)"
    )


def _parse_object(name: str, text: str) -> dict[str, str]:
    example = '\'{"aws_region": "eu-west-1", "aws_access_key_id": "..."}\''
    if len(text) > MAX_TEXT_CHARS:
        raise OptionError(
            f"Option {name!r} is {len(text)} characters long, over {MAX_TEXT_CHARS}: it must be "
            f"a small JSON object of store settings, e.g. {example} (the text is not shown: it "
            "may hold a secret)."
        )
    try:
        value: Any = json.loads(text, parse_int=_integer)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"Option {name!r} must be a JSON object of store settings, e.g. {example}; "
            f"{exc.msg} at column {exc.colno} (the text is not shown: it may hold a secret)."
        ) from None
    except RecursionError:
        raise OptionError(
            f"Option {name!r} nests arrays or objects too deep to read; it must be one JSON "
            f"object whose values are strings, numbers or booleans, e.g. {example} (the text "
            "is not shown: it may hold a secret)."
        ) from None
    if not isinstance(value, dict):
        raise OptionError(
            f"Option {name!r} must be a JSON object of store settings, e.g. "
            f'\'{{"aws_region": "eu-west-1"}}\'; got a JSON {_json_type(value)}.'
        )
    out: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, _Integer) and len(item.lstrip("-")) > MAX_NUMBER_DIGITS:
            raise OptionError(
                f"Option {name!r}: key {_shown_key(key)} holds a number of "
                f"{len(item.lstrip('-'))} digits, over {MAX_NUMBER_DIGITS}; no store setting is "
                "a number that long. Give the setting's value (a string in quotes where it is "
                "not a number)."
            )
        if isinstance(item, bool):
            out[key] = "true" if item else "false"
        elif isinstance(item, float) and not math.isfinite(item):
            raise OptionError(
                f"Option {name!r}: key {_shown_key(key)} must be a string, number or boolean, "
                f"got {item}."
            )
        elif isinstance(item, (str, int, float)):
            out[key] = str(item)
        else:
            raise OptionError(
                f"Option {name!r}: key {_shown_key(key)} must be a string, number or boolean, "
                f"got a JSON {_json_type(item)}."
            )
    return out


class _Integer(str):
    """A JSON integer as its text: never turned into an int (Python refuses to convert more
    than 4,300 digits, with an error that names no option), and shown as it was written."""

    __slots__ = ()


def _integer(text: str) -> _Integer:
    return _Integer(text)


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (``null``, not ``NoneType``)."""
    if value is None:
        return "null"
    names = {list: "array", dict: "object", str: "string", bool: "boolean"}
    return names.get(type(value), "number")  # an _Integer too


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
