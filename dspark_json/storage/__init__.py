"""Where the object stores' settings live: one :class:`StorageSettings` per query (option
``storageOptions`` over the standard environment variables), and per store (:mod:`.s3`,
:mod:`.gcs`, :mod:`.azure`) the URL schemes it accepts, its keys, the pyarrow filesystem built
from them (the executors) and the ``storage_options`` handed to delta-rs (the driver).

:mod:`dspark_json.fs` resolves every path through :func:`filesystem`, so one URL and one set of
settings reach the prompts, the journal, the metrics, the cache and the Delta table alike.
"""

from __future__ import annotations

from dspark_json.storage.base import StorageSettings, Store
from dspark_json.storage.settings import (
    ENVIRONMENT_ONLY,
    delta_options,
    delta_uri,
    filesystem,
    in_effect,
    missing_credentials,
    parse_settings,
    parsing,
    store_of,
)

__all__ = [
    "ENVIRONMENT_ONLY",
    "StorageSettings",
    "Store",
    "delta_options",
    "delta_uri",
    "filesystem",
    "in_effect",
    "missing_credentials",
    "parse_settings",
    "parsing",
    "store_of",
]
