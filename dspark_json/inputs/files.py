"""What one input file holds, as rows: the bytes of each JSON line, whatever the file's form.

- JSON lines (``.jsonl``, ``.ndjson``, ``.json``), plain or compressed with gzip, zstd or bzip2
  (``.gz``, ``.zst``, ``.bz2`` after the name): the content decides, not the name (a compressed
  stream is recognised by its magic bytes, which no JSON text starts with);
- a byte-order mark is dropped (UTF-8's at the start of any line; a UTF-16 or UTF-32 file with a
  BOM is re-encoded as UTF-8); blank lines are not rows;
- Parquet (``.parquet``): each row is one JSON object of its columns (timestamps as ISO text,
  binary as its bytes).

No file is ever held whole: every file is read as a stream, :data:`PIECE` bytes of text at a
time cut at line ends. Plain JSON lines files are indexed when first listed (where every
``ROW_STRIDE``-th row starts; the driver's memory is that index and one piece, whatever the
file's size), so a task reads only the bytes of its rows. Compressed and re-encoded files are
read from their start up to the last row a task needs, and the process remembers where it
stopped (:mod:`.row_index`), so a task that reads a file's rows part after part (one task per
compressed file per micro-batch: :func:`~dspark_json.inputs.listing.plan_partitions`)
decompresses it once.

A file that cannot be read as what it claims to be (a truncated gzip stream, a ``.parquet`` that
is not Parquet) is an error naming the file, never rows that silently go missing: the stream must
not move past rows it could not read.

This module is the face the listing uses; the work is in:

- :mod:`.streams`: a file's content as UTF-8 text pieces (compression sniffed, wide encodings
  re-encoded);
- :mod:`.lines`: which lines are rows, and the rows packed end to end (compiled kernels);
- :mod:`.row_index`: the row index of a plain file, and the cursor in a file read as a stream;
- :mod:`.parquet`: Parquet rows as JSON objects.
"""

from __future__ import annotations

import numpy as np

from dspark_json.inputs.lines import pack_rows, rows_of
from dspark_json.inputs.parquet import PARQUET_SUFFIX, parquet_rows
from dspark_json.inputs.row_index import ROW_STRIDE, RowIndex, index_rows, text_from
from dspark_json.inputs.streams import PIECE
from dspark_json.storage import StorageSettings

__all__ = [
    "INPUT_SUFFIXES",
    "PIECE",
    "ROW_STRIDE",
    "RowIndex",
    "file_rows",
    "index_rows",
    "pack_rows",
    "packed_rows",
    "rows_of",
]

_TEXT_SUFFIXES = (".jsonl", ".ndjson", ".json")
_COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2")
#: The file names read as input.
INPUT_SUFFIXES = (
    *_TEXT_SUFFIXES,
    *(text + packed for text in _TEXT_SUFFIXES for packed in _COMPRESSED_SUFFIXES),
    PARQUET_SUFFIX,
)


def file_rows(
    path: str,
    start: int,
    end: int,
    window: tuple[int, int | None, int] | None,
    storage: StorageSettings,
) -> list[bytes]:
    """Rows ``[start, end)`` of the file at ``path`` (fewer where it holds fewer); only the
    bytes of ``window`` (:meth:`RowIndex.window`) where it is given."""
    if path.endswith(PARQUET_SUFFIX):
        return parquet_rows(path, start, end, storage)
    text, skip = text_from(path, start, end, window, storage)
    return rows_of(text)[skip : skip + end - start]


def packed_rows(
    path: str,
    start: int,
    end: int,
    window: tuple[int, int | None, int] | None,
    storage: StorageSettings,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`file_rows` packed end to end, without a Python object per row: their bytes and
    ``offsets`` (row ``i`` is ``data[offsets[i]:offsets[i + 1]]``), as Arrow lays out text."""
    if path.endswith(PARQUET_SUFFIX):
        rows = parquet_rows(path, start, end, storage)
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(row) for row in rows], out=offsets[1:])
        return np.frombuffer(b"".join(rows), np.uint8), offsets
    text, skip = text_from(path, start, end, window, storage)
    return pack_rows(text, skip, end - start)
