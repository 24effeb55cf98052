"""Azure Blob Storage and ADLS Gen2: ``abfss://container@account.dfs.core.windows.net/key``
(``abfs://``), and ``az://container/key`` / ``azure://`` as delta-rs spells them.

A stub the Azure work fills: the keys are accepted and passed to delta-rs; the executors reach
the store through pyarrow's defaults."""

from __future__ import annotations

import pyarrow.fs as pafs

from dspark_json.storage.base import StorageSettings, Store

__all__ = ["STORE"]

_KEYS = frozenset(
    {
        "azure_storage_account_name",
        "azure_storage_account_key",
        "azure_storage_sas_token",
        "azure_storage_use_emulator",
        "azure_storage_endpoint",
    }
)
_ENVIRONMENT = {
    "AZURE_STORAGE_ACCOUNT_NAME": "azure_storage_account_name",
    "AZURE_STORAGE_ACCOUNT_KEY": "azure_storage_account_key",
    "AZURE_STORAGE_SAS_TOKEN": "azure_storage_sas_token",
    "AZURE_STORAGE_USE_EMULATOR": "azure_storage_use_emulator",
    "AZURE_STORAGE_ENDPOINT": "azure_storage_endpoint",
}


def _filesystem(settings: StorageSettings, uri: str) -> tuple[pafs.FileSystem, str]:
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, str(path)


def _delta_options(settings: StorageSettings) -> dict[str, str]:
    return {key: value for key, value in settings.values if key in _KEYS}


STORE = Store(
    name="Azure",
    schemes=("abfss", "abfs", "az", "azure"),
    keys=_KEYS,
    plain=frozenset({"azure_storage_account_name", "azure_storage_use_emulator"})
    | frozenset({"azure_storage_endpoint"}),
    environment=_ENVIRONMENT,
    filesystem=_filesystem,
    delta_options=_delta_options,
)
