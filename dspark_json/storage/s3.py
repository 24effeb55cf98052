"""Amazon S3 and S3-compatible stores (MinIO, moto, R2): ``s3://bucket/key`` (``s3a://`` too,
as Hadoop spells it)."""

from __future__ import annotations

import contextlib
from urllib.parse import unquote, urlsplit

import pyarrow.fs as pafs

from dspark_json.storage.base import StorageSettings, Store, split_userinfo

__all__ = ["STORE"]

#: What a user sets: key -> pyarrow's ``S3FileSystem`` argument (None: delta-rs only).
_KEYS = {
    "aws_access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "aws_session_token": "session_token",
    "aws_region": "region",
    "aws_endpoint_url": "endpoint_override",
    "aws_allow_http": None,
    "aws_s3_allow_unsafe_rename": None,
    "aws_conditional_put": None,
    "aws_s3_locking_provider": None,
    "aws_skip_signature": "anonymous",
}
_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "aws_access_key_id",
    "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
    "AWS_SESSION_TOKEN": "aws_session_token",
    "AWS_REGION": "aws_region",
    "AWS_DEFAULT_REGION": "aws_region",
    "AWS_ENDPOINT_URL_S3": "aws_endpoint_url",
    "AWS_ENDPOINT_URL": "aws_endpoint_url",
    "AWS_ALLOW_HTTP": "aws_allow_http",
    "AWS_S3_ALLOW_UNSAFE_RENAME": "aws_s3_allow_unsafe_rename",
    "AWS_CONDITIONAL_PUT": "aws_conditional_put",
    "AWS_S3_LOCKING_PROVIDER": "aws_s3_locking_provider",
}
_ALIASES = {
    "aws_default_region": "aws_region",
    "aws_endpoint": "aws_endpoint_url",
    "aws_token": "aws_session_token",
}


def _filesystem(settings: StorageSettings, uri: str) -> tuple[pafs.FileSystem, str]:
    kwargs: dict[str, object] = {}
    for key, argument in _KEYS.items():
        value = settings.get(key)
        if value is None or argument is None:
            continue
        if argument == "anonymous":
            kwargs[argument] = settings.flag(key)
        elif argument == "endpoint_override" and "://" in value:
            parts = urlsplit(value)
            kwargs["scheme"] = parts.scheme
            kwargs[argument] = parts.netloc + parts.path.rstrip("/")
        else:
            kwargs[argument] = value
    userinfo, rest = split_userinfo(uri)
    if userinfo is not None:  # s3://key:secret@bucket/...: the URI's own, as pyarrow reads them
        key, _, secret = userinfo.partition(":")
        kwargs["access_key"], kwargs["secret_key"] = unquote(key), unquote(secret)
    path = rest.rstrip("/")  # as written: an object's name may hold '?' or '#'
    if "region" not in kwargs and "endpoint_override" not in kwargs:
        # AWS itself, no region given: the bucket's, as pyarrow's from_uri finds it
        with contextlib.suppress(OSError):
            kwargs["region"] = pafs.resolve_s3_region(path.split("/", 1)[0])
    return pafs.S3FileSystem(**kwargs), path


def _delta_options(settings: StorageSettings) -> dict[str, str]:
    out = {key: value for key, value in settings.values if key in _KEYS}
    endpoint = out.get("aws_endpoint_url", "")
    if endpoint.lower().startswith("http://") and "aws_allow_http" not in out:
        out["aws_allow_http"] = "true"  # the endpoint says http: delta-rs refuses it otherwise
    return out


def _missing(settings: StorageSettings) -> str | None:
    has_id = settings.get("aws_access_key_id") is not None
    has_secret = settings.get("aws_secret_access_key") is not None
    if has_id != has_secret:
        given, lacking = (
            ("aws_access_key_id", "aws_secret_access_key")
            if has_id
            else ("aws_secret_access_key", "aws_access_key_id")
        )
        return (
            f"S3: {given} is set but {lacking} is not: set both in option 'storageOptions' "
            f"(or the environment variables {lacking.upper()} and {given.upper()})"
        )
    return None


STORE = Store(
    name="S3",
    schemes=("s3", "s3a"),
    keys=frozenset(_KEYS),
    plain=frozenset(
        {"aws_region", "aws_endpoint_url", "aws_allow_http", "aws_s3_allow_unsafe_rename"}
        | {"aws_conditional_put", "aws_s3_locking_provider", "aws_skip_signature"}
    ),
    environment=_ENVIRONMENT,
    filesystem=_filesystem,
    delta_options=_delta_options,
    aliases=_ALIASES,
    missing=_missing,
)
