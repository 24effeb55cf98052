"""Exceptions raised by dspark-json.

Every message stands alone: Spark copies it into an ``AnalysisException`` or a streaming query's
failure text, far from the code that raised it. It names the option or the row, the value and the
fix. Third-party errors are translated at one boundary each, always ``raise Ours(...) from exc``.

    DSparkJsonError
     ├── OptionError            an option is unknown, missing or has a bad value (at ``.load()``)
     ├── SchemaError            a schema (user, JSON Schema) cannot be turned into Spark types
     ├── ServerError            the model server cannot be reached or refuses the query's setup
     ├── BackendUnavailable     ``parseMode=gpu`` where cuDF or a CUDA device is missing
     └── RecordError            FAILFAST: a row could not be fetched or parsed
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = [
    "MASK",
    "BackendUnavailable",
    "DSparkJsonError",
    "OptionError",
    "RecordError",
    "SchemaError",
    "ServerError",
    "mask_uris",
    "short_errors",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")


class DSparkJsonError(Exception):
    """Base class of every error dspark-json raises on purpose.

    Catch it to handle all of them; the subclass and its message say what to change."""

    def __str__(self) -> str:
        _show_tracebacks_again()  # PySpark reads its switch, then the message: see short_errors
        return super().__str__()


class OptionError(DSparkJsonError, ValueError):
    """An option is unknown, missing, or has a value that is not allowed.

    Raised at ``.load()`` (or by ``generate()``), before any request. The message names the
    option, the value and what it accepts (a misspelt name gets the closest known one): change
    that option (the options reference lists them all)."""


class SchemaError(DSparkJsonError, ValueError):
    """A schema cannot be mapped to Spark types.

    Raised at ``.load()`` for a JSON Schema (``responseFormat``, ``tools``' parameters), a
    ``.schema(...)`` or a ``schemaHints`` that cannot type the columns, naming the path
    (``#/$defs/D16``) and why: copy a remote ``$ref`` under ``$defs``, simplify the part named, or
    pin that column with ``.schema(...)`` / ``schemaHints``; with
    ``schemaEvolutionMode=failOnNewColumns``, pin the new fields it names or go back to
    ``rescue``."""


class ServerError(DSparkJsonError):
    """The model server is unreachable or does not serve what the query needs.

    Raised at ``.load()`` from the checks of each endpoint, naming the URL and the cause: check
    option ``endpoint`` from where the driver runs (executors must reach the same URL), the key
    (``apiKeyEnv`` on a 401/403), the ``model`` (one the server lists at ``/v1/models``), or the
    server's flag the message names (``--scheduling-policy priority`` for option ``priority``)."""


class BackendUnavailable(DSparkJsonError):
    """The parse backend that was asked for cannot run on this machine.

    ``parseMode=gpu`` where cuDF or a CUDA device is missing: install the GPU extra
    (``pip install '.[gpu]'`` for CUDA 12, ``'.[gpu-cu13]'`` for CUDA 13) where the query runs,
    or use ``parseMode=auto`` (GPU when there is one, else the CPU) or ``cpu``."""


class RecordError(DSparkJsonError):
    """FAILFAST mode met a row it could not fetch or parse.

    The message names the row (``custom_id``, or file and row number), its status and the
    server's message: fix that prompt or the server, or use ``mode=PERMISSIVE`` (the default:
    the row is kept with ``_status`` and ``_error``) or ``DROPMALFORMED``."""


def short_errors(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Our errors leave a data source's entry points (``schema()``, ``reader()``...) as their
    message alone: Spark prints the Python traceback inside its ``AnalysisException``, where a
    message that stands alone says all (it names the cause). The chained causes are dropped;
    in a Spark Python worker the traceback too (:func:`_hide_traceback`), so that the text after
    Spark's ``[PYTHON_DATA_SOURCE_ERROR] Failed to ...:`` is ``OptionError: <our message>``."""

    @functools.wraps(method)
    def entry(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        shown: BaseException | None = None
        try:
            return method(*args, **kwargs)
        except DSparkJsonError as exc:
            shown = type(exc)(*(_masked(arg) for arg in exc.args))
            _hide_traceback()
        except Exception as exc:  # delta-rs's, pyarrow's: they quote a table URI whole
            shown = _masked_other(exc)
            if shown is exc:
                raise
        # Raised here, after the except blocks: the unmasked error is not its __context__.
        shown.__suppress_context__ = True
        raise shown

    return entry


#: PySpark's switch (``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` sets it for the
#: workers of UDFs): the error text it sends the JVM is the exception's line alone.
_HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"
#: What the switch held before :func:`_hide_traceback` set it, under :data:`_HIDE_TRACEBACK`
#: (``None``: unset); empty: not set by us.
_hidden_from: dict[str, str | None] = {}


def _hide_traceback() -> None:
    """In a Spark Python worker (PySpark's ``PYTHON_WORKER_FACTORY_SECRET`` is in its
    environment), turn PySpark's traceback switch on for the error being raised: PySpark reads
    it when it formats the error, then reads the message, whose ``__str__`` turns the switch
    back (:func:`_show_tracebacks_again`), so that no later error of the worker (a user's UDF)
    loses its traceback."""
    if "PYTHON_WORKER_FACTORY_SECRET" not in os.environ or _hidden_from:
        return
    _hidden_from[_HIDE_TRACEBACK] = os.environ.get(_HIDE_TRACEBACK)
    os.environ[_HIDE_TRACEBACK] = "1"


def _show_tracebacks_again() -> None:
    """Undo :func:`_hide_traceback` (nothing where it did nothing)."""
    if not _hidden_from:
        return
    before = _hidden_from.pop(_HIDE_TRACEBACK)
    if before is None:
        os.environ.pop(_HIDE_TRACEBACK, None)
    else:
        os.environ[_HIDE_TRACEBACK] = before


def _masked(arg: object) -> object:
    """A message argument with the credentials of the URIs in it masked."""
    return mask_uris(arg) if isinstance(arg, str) else arg


def _masked_other(exc: Exception) -> Exception:
    """``exc`` itself where its text holds no credential, else an ``OSError`` that says the
    same masked (delta-rs's exception types take no plain message in every version)."""
    text = mask_uris(str(exc))
    if text == str(exc):
        return exc
    return OSError(f"{type(exc).__name__}: {text}")


#: What stands for a secret in every message, log line and ``repr``.
MASK = "***"
#: ``scheme://user:pass@``: up to the last ``@`` of the URI (a password may hold ``/`` or ``@``:
#: an AWS secret key often has a ``/``).
_URI_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s'\"<>]*@")
#: Query parameters that hold a credential: SAS tokens (``sig``), pre-signed URLs
#: (``X-Amz-Signature``, ``X-Amz-Credential``, ``X-Amz-Security-Token``, ``X-Goog-Signature``),
#: and the usual names of keys, tokens and passwords.
_QUERY_SECRETS = re.compile(
    r"(?i)([?&;](?:sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|"
    r"x-goog-signature|x-goog-credential|token|access_token|sas_token|key|api_key|apikey|"
    r"access_key|secret_key|secret|password|passwd|pwd)=)"
    # a value masked already is kept as it is (a message masked twice keeps the text after it)
    r"(?:\*\*\*(?![A-Za-z0-9%+/=_.~-])|[^&;#\s'\"]*)"
)


def mask_uris(text: str) -> str:
    """``text`` with the credentials of every URI in it masked: ``scheme://user:pass@`` and the
    values of query parameters that hold one (``sig=``, ``X-Amz-Signature=``, ``token=``,
    ``key=``, ``password=``, ``secret=``...)."""
    return _QUERY_SECRETS.sub(rf"\1{MASK}", _URI_CREDENTIALS.sub(_masked_userinfo, text))


#: Schemes whose ``name@host`` is no secret (Azure's ``container@account``): only a user info
#: with a ``:`` (a password) is masked there.
_NAMED_USERINFO = frozenset({"abfs", "abfss", "wasb", "wasbs"})


def _masked_userinfo(found: re.Match[str]) -> str:
    scheme = found.group(1)
    userinfo = found.group(0)[len(scheme) : -1]
    if scheme[:-3].lower() in _NAMED_USERINFO and ":" not in userinfo:
        return found.group(0)
    return f"{scheme}{MASK}@"
