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
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = [
    "BackendUnavailable",
    "DSparkJsonError",
    "OptionError",
    "RecordError",
    "SchemaError",
    "ServerError",
    "short_errors",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")


class DSparkJsonError(Exception):
    """Base class of every error dspark-json raises on purpose."""


class OptionError(DSparkJsonError, ValueError):
    """An option is unknown, missing, or has a value that is not allowed."""


class SchemaError(DSparkJsonError, ValueError):
    """A schema cannot be mapped to Spark types."""


class ServerError(DSparkJsonError):
    """The model server is unreachable or does not serve what the query needs."""


class BackendUnavailable(DSparkJsonError):
    """The parse backend that was asked for cannot run on this machine."""


class RecordError(DSparkJsonError):
    """FAILFAST mode met a row it could not fetch or parse."""


def short_errors(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Our errors leave a data source's entry points (``schema()``, ``reader()``...) without
    the frames and the chained causes beneath: Spark prints the whole Python traceback inside
    its ``AnalysisException``, where a message that stands alone says all (it names the cause)."""

    @functools.wraps(method)
    def entry(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        shown: BaseException | None = None
        try:
            return method(*args, **kwargs)
        except DSparkJsonError as exc:
            shown = type(exc)(*(_masked(arg) for arg in exc.args))
        except Exception as exc:  # delta-rs's, pyarrow's: they quote a table URI whole
            shown = _masked_other(exc)
            if shown is exc:
                raise
        shown.__suppress_context__ = True
        raise shown  # outside the except block: the unmasked one is not its __context__

    return entry


def _masked(arg: object) -> object:
    """A message argument with the credentials of the URIs in it masked."""
    from dspark_json.storage.base import mask_uris  # imported late: the errors stay light

    return mask_uris(arg) if isinstance(arg, str) else arg


def _masked_other(exc: Exception) -> Exception:
    """``exc`` itself where its text holds no credential, else an ``OSError`` that says the
    same masked (delta-rs's exception types take no plain message in every version)."""
    from dspark_json.storage.base import mask_uris

    text = mask_uris(str(exc))
    if text == str(exc):
        return exc
    return OSError(f"{type(exc).__name__}: {text}")
