"""Google Cloud Storage: ``gs://bucket/key`` (``gcs://`` too, for pyarrow; delta-rs reads
``gs://``).

Credentials, as delta-rs spells them: ``google_service_account`` (a service account file),
``google_service_account_key`` (its JSON text), ``google_application_credentials`` (an
application-default credentials file; the variable ``GOOGLE_APPLICATION_CREDENTIALS``).
pyarrow's ``GcsFileSystem`` takes no credentials file as an argument, only the variable
``GOOGLE_APPLICATION_CREDENTIALS``, read when the filesystem is made: so a file given here is
set in that variable for the moment one filesystem is made, under a lock, and the variable put
back (a key's JSON text goes through a private temporary file).

An emulator (fake-gcs-server): ``google_base_url`` (or the variables
``CLOUD_STORAGE_EMULATOR_ENDPOINT``, ``STORAGE_EMULATOR_HOST``), or a service account whose JSON
holds ``gcs_base_url`` (and ``disable_oauth``), as object_store reads it: pyarrow gets the
endpoint and scheme, anonymously; delta-rs gets a service account key naming the URL.

Without any credentials pyarrow asks the GCE metadata server and retries for 15 minutes: at
``.load()`` that is a silent hang, so :data:`STORE`'s check says what to set instead, unless a
metadata server answers or gcloud's application-default credentials file exists.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from dspark_json.errors import OptionError
from dspark_json.regular import RefusedFile, TooLarge, read_local
from dspark_json.storage.base import StorageSettings, Store, refuse_userinfo

__all__ = ["ENVIRONMENT_LOCK", "STORE", "emulator_account"]

_KEYS = frozenset(
    {
        "google_service_account",
        "google_service_account_key",
        "google_application_credentials",
        "google_base_url",
    }
)
_ALIASES = {
    "service_account": "google_service_account",
    "google_service_account_path": "google_service_account",
    "service_account_path": "google_service_account",
    "service_account_key": "google_service_account_key",
    "application_credentials": "google_application_credentials",
}
_ENVIRONMENT = {
    "GOOGLE_SERVICE_ACCOUNT": "google_service_account",
    "GOOGLE_SERVICE_ACCOUNT_PATH": "google_service_account",
    "GOOGLE_SERVICE_ACCOUNT_KEY": "google_service_account_key",
    "GOOGLE_APPLICATION_CREDENTIALS": "google_application_credentials",
    "CLOUD_STORAGE_EMULATOR_ENDPOINT": "google_base_url",
    "STORAGE_EMULATOR_HOST": "google_base_url",
}
_CREDENTIALS_VARIABLE = "GOOGLE_APPLICATION_CREDENTIALS"
#: Held while the variable is lent, while any filesystem is made (it reads the variable), and
#: while :func:`~dspark_json.storage.parse_settings` reads the environment.
ENVIRONMENT_LOCK = threading.Lock()
_METADATA_HOST = "metadata.google.internal"
_METADATA_WAIT_S = 2.0


def emulator_account(base_url: str) -> str:
    """A service account key JSON that points object_store (delta-rs) at an emulator at
    ``base_url``, without OAuth: what object_store's own tests give fake-gcs-server."""
    return json.dumps(
        {
            "gcs_base_url": base_url.rstrip("/"),
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        }
    )


def _account(settings: StorageSettings) -> dict[str, Any] | None:
    """The service account given (its file read, or its key's JSON), or ``None``."""
    text = settings.get("google_service_account_key")
    source = "google_service_account_key"
    if not text:
        path = settings.get("google_service_account")
        if not path:
            return None
        source = "google_service_account"
        try:
            text = _key_file(path)
        except (OSError, UnicodeDecodeError) as exc:
            if isinstance(exc, RefusedFile):
                why = exc.reason + (": not a key file" if isinstance(exc, TooLarge) else "")
            else:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise OptionError(
                f"GCS: the service account file named by storageOptions' {source} cannot be "
                f"read ({why}): give a readable JSON key file."
            ) from None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, nested too deep, a 5,000-digit number
        raise OptionError(
            f"GCS: storageOptions' {source} is not a service account's JSON (not shown: it "
            "holds a key): give the key file Google made for the account."
        ) from None
    if not isinstance(value, dict):
        raise OptionError(f"GCS: storageOptions' {source} must hold a JSON object.")
    return value


#: The largest service account key file read (Google's are about 2.5 KB).
MAX_KEY_FILE_BYTES = 1 << 20


def _key_file(path: str) -> str:
    """The text of the key file at ``path``: :func:`~dspark_json.regular.read_local` (a FIFO
    or a device would block ``.load()`` for good), at most :data:`MAX_KEY_FILE_BYTES`."""
    return read_local(path, MAX_KEY_FILE_BYTES).decode("utf-8")


def _base_url(settings: StorageSettings, account: dict[str, Any] | None) -> str | None:
    url = settings.get("google_base_url") or (account or {}).get("gcs_base_url")
    if not url:
        return None
    return str(url) if "://" in str(url) else f"http://{url}"


def _filesystem(settings: StorageSettings, uri: str) -> tuple[pafs.FileSystem, str]:
    refuse_userinfo(uri, "GCS", "google_service_account or google_service_account_key")
    # the path as written: an object's name may hold '?' or '#'
    path = uri.split("://", 1)[1].rstrip("/")
    return _made(settings), path


@functools.lru_cache(maxsize=16)
def _made(settings: StorageSettings) -> pafs.GcsFileSystem:
    """One filesystem per settings in a process (a credentials file is read, and lent, once)."""
    account = _account(settings)
    base_url = _base_url(settings, account)
    if base_url is not None:
        endpoint = urlsplit(base_url)
        anonymous = account is None or bool(account.get("disable_oauth"))
        with ENVIRONMENT_LOCK:  # another thread may be lending the variable this moment
            return pafs.GcsFileSystem(
                anonymous=anonymous, scheme=endpoint.scheme, endpoint_override=endpoint.netloc
            )
    # Checked here, where every path (a tools file read while the options are parsed too)
    # makes its filesystem: without credentials pyarrow waits 15 minutes on a metadata server.
    missing = _missing(settings)
    if missing:
        raise OptionError(missing + ".")
    with _credentials_file(settings, account) as credentials, ENVIRONMENT_LOCK:
        if credentials is None:
            return pafs.GcsFileSystem()
        with _variable(_CREDENTIALS_VARIABLE, credentials):
            return pafs.GcsFileSystem()


@contextlib.contextmanager
def _credentials_file(
    settings: StorageSettings, account: dict[str, Any] | None
) -> Iterator[str | None]:
    """The credentials file pyarrow should read: the one named, or the key's JSON written to a
    private temporary file for the moment (removed after)."""
    named = settings.get("google_service_account") or settings.get("google_application_credentials")
    if settings.get("google_service_account_key") is None or account is None:
        yield named
        return
    with tempfile.TemporaryDirectory(prefix="dspark-json-gcs-") as directory:
        path = Path(directory) / "account.json"
        path.touch(mode=0o600)
        path.write_text(json.dumps(account), encoding="utf-8")
        yield str(path)


@contextlib.contextmanager
def _variable(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _delta_options(settings: StorageSettings) -> dict[str, str]:
    out = {key: value for key, value in settings.values if key in _KEYS}
    base_url = out.pop("google_base_url", None)
    if base_url and "google_service_account_key" not in out:
        out.pop("google_service_account", None)
        out["google_service_account_key"] = emulator_account(
            base_url if "://" in base_url else f"http://{base_url}"
        )
    return out


def _metadata_server() -> bool:
    """A GCE metadata server answers a name lookup within a moment (on Google Cloud)."""
    if os.environ.get("GCE_METADATA_HOST"):
        return True
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(socket.getaddrinfo, _METADATA_HOST, 80).result(timeout=_METADATA_WAIT_S)
    except (OSError, FutureTimeout):
        return False
    finally:
        pool.shutdown(wait=False)
    return True


def _missing(settings: StorageSettings) -> str | None:
    if any(settings.get(key) for key in _KEYS):
        return None
    gcloud = Path.home() / ".config" / "gcloud" / "application_default_credentials.json"
    if gcloud.exists() or _metadata_server():
        return None
    return (
        "GCS: no credentials, and no GCE metadata server to ask (pyarrow would retry for 15 "
        "minutes): set google_service_account (a service account key file) or "
        "google_service_account_key in option 'storageOptions', or the environment variable "
        "GOOGLE_APPLICATION_CREDENTIALS; for an emulator, google_base_url (or "
        "CLOUD_STORAGE_EMULATOR_ENDPOINT)"
    )


STORE = Store(
    name="GCS",
    schemes=("gs", "gcs"),
    keys=_KEYS,
    plain=frozenset(
        {"google_base_url", "google_service_account", "google_application_credentials"}
    ),
    environment=_ENVIRONMENT,
    filesystem=_filesystem,
    delta_options=_delta_options,
    aliases=_ALIASES,
    missing=_missing,
    delta_scheme="gs",
)
