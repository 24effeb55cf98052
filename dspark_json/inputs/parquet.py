"""Parquet input (``.parquet``): each row one JSON object of its columns (timestamps as ISO
text, binary as its bytes), reading only the row groups that hold the rows asked for."""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from dspark_json.errors import DSparkJsonError
from dspark_json.fs import resolve
from dspark_json.inputs.streams import REPLACE_FIX, open_input
from dspark_json.storage import StorageSettings

__all__ = ["PARQUET_SUFFIX", "open_parquet", "parquet_rows"]

PARQUET_SUFFIX = ".parquet"


@contextmanager
def open_parquet(path: str, storage: StorageSettings) -> Iterator[Any]:
    """The Parquet file at ``path``, open for reading; an error naming it where it is not one."""
    import pyarrow.parquet as pq

    fs, inner = resolve(path, storage)
    with open_input(fs, inner, path) as source:
        try:
            parquet = pq.ParquetFile(source)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DSparkJsonError(
                f"Input file {path} is named .parquet but is not a Parquet file ({exc}). "
                f"{REPLACE_FIX}"
            ) from exc
        yield parquet


def parquet_rows(path: str, start: int, end: int, storage: StorageSettings) -> list[bytes]:
    """Rows ``[start, end)`` of a Parquet file as JSON objects, reading only the row groups
    that hold them."""
    with open_parquet(path, storage) as parquet:
        groups, first, offset = [], None, 0
        for index in range(parquet.metadata.num_row_groups):
            size = parquet.metadata.row_group(index).num_rows
            if offset < end and offset + size > start:
                groups.append(index)
                first = offset if first is None else first
            offset += size
        if not groups or first is None:
            return []
        table = parquet.read_row_groups(groups).slice(start - first, end - start)
    return [
        json.dumps(row, ensure_ascii=False, default=_plain).encode("utf-8", "surrogateescape")
        for row in table.to_pylist()
    ]


def _plain(value: Any) -> Any:
    """A Parquet value JSON cannot hold, as JSON: times as ISO text, decimals as numbers' text,
    binary as its text (bytes that are not UTF-8 stay as they are: the row is then not valid
    UTF-8, as a JSON line with such bytes would be)."""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)  # a UUID, an extension type's value
