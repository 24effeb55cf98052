"""Azure Blob Storage and ADLS Gen2: ``abfss://container@account.dfs.core.windows.net/key``
(``abfs://``, or ``.blob.`` for the host), and ``az://container/key``, ``azure://container/key``
and ``abfss://container/key`` as delta-rs spells them (the account then comes from
``azure_storage_account_name``).

Every spelling is read here into (account, container, key): pyarrow's ``AzureFileSystem`` on the
executors gets the account and ``container/key``, delta-rs gets the URL as written (it reads all
of them) with the same keys, so one URL and one ``storageOptions`` reach both.

An endpoint (``azure_storage_endpoint``: ``http://127.0.0.1:10000/devstoreaccount1`` for
Azurite, path style; ``https://account.blob.core.windows.net``, host style) becomes pyarrow's
``blob_storage_authority`` / ``dfs_storage_authority`` and scheme; an ``http://`` one adds
``allow_http`` for delta-rs, which refuses plain HTTP otherwise. ``azure_storage_use_emulator``
means Azurite at ``AZURITE_BLOB_STORAGE_URL`` (default ``http://127.0.0.1:10000``) with its
well-known account and key, as object_store reads it.
"""

from __future__ import annotations

import functools
import os
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from dspark_json.errors import OptionError, mask_uris
from dspark_json.storage.base import StorageSettings, Store, refuse_userinfo

__all__ = ["EMULATOR_ACCOUNT", "EMULATOR_KEY", "STORE", "locate"]

#: Azurite's well-known development account and key (public: Microsoft's documentation).
EMULATOR_ACCOUNT = "devstoreaccount1"
EMULATOR_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
_EMULATOR_URL = "http://127.0.0.1:10000"

#: What a user sets (object_store's spellings) -> pyarrow's ``AzureFileSystem`` argument, or
#: None where pyarrow takes it another way (account, endpoint, emulator: read below).
_KEYS = {
    "azure_storage_account_name": None,
    "azure_storage_account_key": "account_key",
    "azure_storage_sas_token": "sas_token",
    "azure_client_id": "client_id",
    "azure_client_secret": "client_secret",
    "azure_tenant_id": "tenant_id",
    "azure_storage_use_emulator": None,
    "azure_storage_endpoint": None,
}
_ALIASES = {
    "azure_storage_access_key": "azure_storage_account_key",
    "azure_storage_master_key": "azure_storage_account_key",
    "azure_storage_sas_key": "azure_storage_sas_token",
    "azure_storage_client_id": "azure_client_id",
    "azure_storage_client_secret": "azure_client_secret",
    "azure_storage_tenant_id": "azure_tenant_id",
    "azure_storage_authority_id": "azure_tenant_id",
    "azure_endpoint": "azure_storage_endpoint",
}
_ENVIRONMENT = {
    "AZURE_STORAGE_ACCOUNT_NAME": "azure_storage_account_name",
    "AZURE_STORAGE_ACCOUNT_KEY": "azure_storage_account_key",
    "AZURE_STORAGE_ACCESS_KEY": "azure_storage_account_key",
    "AZURE_STORAGE_SAS_TOKEN": "azure_storage_sas_token",
    "AZURE_STORAGE_SAS_KEY": "azure_storage_sas_token",
    "AZURE_CLIENT_ID": "azure_client_id",
    "AZURE_CLIENT_SECRET": "azure_client_secret",
    "AZURE_TENANT_ID": "azure_tenant_id",
    "AZURE_STORAGE_USE_EMULATOR": "azure_storage_use_emulator",
    "AZURE_STORAGE_ENDPOINT": "azure_storage_endpoint",
}
_HOST_SUFFIXES = (".dfs.core.windows.net", ".blob.core.windows.net")


def locate(uri: str, settings: StorageSettings) -> tuple[str, str, str]:
    """``uri``'s (account, container, key inside the container), whichever spelling it has.

    The account is the URL's (``container@account.dfs.core.windows.net``), else
    ``azure_storage_account_name``, else Azurite's where the emulator is asked for. Raises
    :class:`OptionError` where a URL names no container or no account is known, or where the
    URL's account and ``azure_storage_account_name`` differ.
    """
    refuse_userinfo(
        uri, "Azure", "azure_storage_account_key, azure_storage_sas_token or azure_client_secret"
    )
    # the path as written after the authority: an object's name may hold '?' or '#'
    rest = uri.split("://", 1)[1]
    netloc, _, key = rest.partition("/")
    key = key.strip("/")
    url_account = None
    if "@" in netloc:
        container, host = netloc.split("@", 1)
        url_account = host.split(".", 1)[0] if "." in host else host
    else:
        container = netloc
    if not container:
        raise OptionError(
            f"Azure URL {_shown(uri)} names no container: write "
            "abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH or az://CONTAINER/PATH."
        )
    given = settings.get("azure_storage_account_name")
    if url_account and given and url_account != given:
        raise OptionError(
            f"Azure URL {_shown(uri)} names account {url_account!r} but storageOptions' "
            f"azure_storage_account_name is {given!r}: make them agree (or drop one)."
        )
    account = url_account or given or _endpoint_account(settings)
    if not account and settings.flag("azure_storage_use_emulator"):
        account = EMULATOR_ACCOUNT
    if not account:
        raise OptionError(
            f"Azure URL {_shown(uri)} names no account: write "
            "abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH, or set "
            "azure_storage_account_name in option 'storageOptions' (or the environment "
            "variable AZURE_STORAGE_ACCOUNT_NAME)."
        )
    return account, container, key


def _shown(uri: str) -> str:
    """A URL in a message: its query (a SAS token's place) left out, its credentials masked."""
    return repr(mask_uris(uri.split("?", 1)[0]))


def _endpoint(settings: StorageSettings) -> str | None:
    """The blob endpoint asked for: ``azure_storage_endpoint``, or Azurite's."""
    endpoint = settings.get("azure_storage_endpoint")
    if endpoint:
        return endpoint
    if settings.flag("azure_storage_use_emulator"):
        return os.environ.get("AZURITE_BLOB_STORAGE_URL") or _EMULATOR_URL
    return None


def _endpoint_account(settings: StorageSettings) -> str | None:
    """The account a path-style endpoint names (``http://host:port/account``)."""
    endpoint = settings.get("azure_storage_endpoint")
    if not endpoint:
        return None
    first = urlsplit(endpoint).path.strip("/").split("/", 1)[0]
    return first or None


def _authority(endpoint: str, account: str) -> tuple[str, str]:
    """pyarrow's (authority, scheme) for ``endpoint``: ``.blob.core.windows.net`` (host style:
    pyarrow puts the account in front) or ``host:port`` (path style: pyarrow puts the account
    after it, as Azurite wants)."""
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    host = parts.netloc.rsplit("@", 1)[-1]
    if host.startswith(account + "."):
        return host[len(account) :], parts.scheme or "https"
    return host, parts.scheme or "https"


def _filesystem(settings: StorageSettings, uri: str) -> tuple[pafs.FileSystem, str]:
    account, container, key = locate(uri, settings)
    kwargs: dict[str, str] = {"account_name": account}
    for name, argument in _KEYS.items():
        value = settings.get(name)
        if value and argument is not None:
            kwargs[argument] = "?" + value.lstrip("?") if argument == "sas_token" else value
    endpoint = _endpoint(settings)
    if endpoint:
        authority, scheme = _authority(endpoint, account)
        kwargs.update(
            blob_storage_authority=authority,
            dfs_storage_authority=authority,
            blob_storage_scheme=scheme,
            dfs_storage_scheme=scheme,
        )
    emulated = settings.flag("azure_storage_use_emulator")
    if emulated and account == EMULATOR_ACCOUNT and not {"account_key", "sas_token"} & set(kwargs):
        kwargs["account_key"] = EMULATOR_KEY
    if "account_key" in kwargs and "sas_token" in kwargs:
        kwargs.pop("sas_token")  # pyarrow takes one; object_store prefers the key too
    return _made(tuple(sorted(kwargs.items()))), f"{container}/{key}".rstrip("/")


@functools.lru_cache(maxsize=16)
def _made(arguments: tuple[tuple[str, str], ...]) -> pafs.AzureFileSystem:
    """One filesystem per set of arguments in a process: each new one asks the account
    whether it has a hierarchical namespace before its first call (a round trip per path
    operation otherwise; measured on Azurite: 7.4 ms a call with a new one, 3.4 ms reused)."""
    return pafs.AzureFileSystem(**dict(arguments))


def _delta_options(settings: StorageSettings) -> dict[str, str]:
    out = {key: value for key, value in settings.values if key in _KEYS}
    endpoint = out.get("azure_storage_endpoint", "")
    if endpoint.lower().startswith("http://"):
        out["allow_http"] = "true"  # the endpoint says http: delta-rs refuses it otherwise
    return out


STORE = Store(
    name="Azure",
    schemes=("abfss", "abfs", "az", "azure"),
    keys=frozenset(_KEYS),
    plain=frozenset(
        {"azure_storage_account_name", "azure_storage_use_emulator", "azure_storage_endpoint"}
        | {"azure_client_id", "azure_tenant_id"}
    ),
    environment=_ENVIRONMENT,
    filesystem=_filesystem,
    delta_options=_delta_options,
    aliases=_ALIASES,
)
