"""Google Cloud Storage: ``gs://bucket/key`` (``gcs://`` too).

A stub the GCS work fills: the keys are accepted and passed to delta-rs; the executors reach
the store through pyarrow's defaults (``GOOGLE_APPLICATION_CREDENTIALS``...)."""

from __future__ import annotations

import pyarrow.fs as pafs

from dspark_json.storage.base import StorageSettings, Store

__all__ = ["STORE"]

_KEYS = frozenset({"google_service_account", "google_service_account_key", "google_base_url"})
_ENVIRONMENT = {
    "GOOGLE_SERVICE_ACCOUNT": "google_service_account",
    "GOOGLE_APPLICATION_CREDENTIALS": "google_service_account",
    "GOOGLE_SERVICE_ACCOUNT_KEY": "google_service_account_key",
}


def _filesystem(settings: StorageSettings, uri: str) -> tuple[pafs.FileSystem, str]:
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, str(path)


def _delta_options(settings: StorageSettings) -> dict[str, str]:
    return {key: value for key, value in settings.values if key in _KEYS}


STORE = Store(
    name="GCS",
    schemes=("gs", "gcs"),
    keys=_KEYS,
    plain=frozenset({"google_base_url"}),
    environment=_ENVIRONMENT,
    filesystem=_filesystem,
    delta_options=_delta_options,
)
