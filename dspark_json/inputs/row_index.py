"""Where a file's rows are: the row index of a plain JSON lines file (where every
``ROW_STRIDE``-th row starts, taken when the file is first listed, so that a task reads only the
bytes of its rows), and, for a file read as a stream from its start (compressed, re-encoded,
lone CR line ends), the cursor where this process stopped in it (:class:`_Cursor`), so that a
task that reads a file's rows part after part decompresses it once."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

import numpy as np

from dspark_json.errors import DSparkJsonError
from dspark_json.fs import read_range
from dspark_json.inputs.lines import count_rows, row_starts, rows_of
from dspark_json.inputs.parquet import PARQUET_SUFFIX, open_parquet
from dspark_json.inputs.streams import file_version, pieces
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

__all__ = ["ROW_STRIDE", "RowIndex", "index_rows", "text_from"]

#: The listing remembers where every ``ROW_STRIDE``-th row of a plain text file starts.
ROW_STRIDE = 64


@dataclass(frozen=True)
class RowIndex:
    """How many rows a file holds and, for plain JSON lines, the byte where every
    ``ROW_STRIDE``-th row starts (``starts[k]`` is row ``k * ROW_STRIDE``'s); ``None`` for
    files read as a stream from their start (compressed, UTF-16/32, lone CR line ends) and
    Parquet (its row groups say)."""

    rows: int
    starts: tuple[int, ...] | None = None

    def window(self, start: int, end: int) -> tuple[int, int | None, int] | None:
        """Where rows ``[start, end)`` lie: ``(first byte, end byte or None for the file's
        end, rows to skip from the first byte)``; ``None`` without an index."""
        if self.starts is None:
            return None
        first = start // ROW_STRIDE
        after = -(-end // ROW_STRIDE)
        stop = self.starts[after] if after < len(self.starts) else None
        return self.starts[first], stop, start - first * ROW_STRIDE


def index_rows(path: str, *, storage: StorageSettings = ENVIRONMENT_ONLY) -> RowIndex:
    """The row count of the file at ``path`` and, where it is plain text, its row index
    (driver side, when the file is first listed): read as a stream, a piece at a time."""
    if path.endswith(PARQUET_SUFFIX):
        with open_parquet(path, storage) as parquet:
            return RowIndex(int(parquet.metadata.num_rows))
    rows, position, plain = 0, 0, True
    starts: list[np.ndarray] = []
    for piece, stored in pieces(path, storage):
        if plain and (not stored or piece.count(b"\r") != piece.count(b"\r\n")):
            plain = False  # decoded, or lone CR line ends: read from the start, no index
            starts = []
        if plain:
            found = row_starts(piece)
            starts.append(found[(-rows) % ROW_STRIDE :: ROW_STRIDE] + position)
            rows += len(found)
        else:
            rows += count_rows(piece)
        position += len(piece)
    if not plain:
        return RowIndex(rows)
    return RowIndex(rows, tuple(np.concatenate(starts).tolist()) if starts else ())


def text_from(
    path: str,
    start: int,
    end: int,
    window: tuple[int, int | None, int] | None,
    storage: StorageSettings,
) -> tuple[bytes, int]:
    """Text that holds the file's rows ``[start, end)``, and how many rows of it come before
    row ``start``: the bytes of ``window`` where it is given, else the pieces of the file's
    stream that hold them (read from where this process last stopped in it, when that is
    before ``start``)."""
    if window is None:
        return _Cursor.take(path, start, end, storage)
    first, stop, skip = window
    lead = 1 if first > 0 else 0  # the line end before the first row, read to check it
    chunk = read_range(path, first - lead, stop, storage=storage)
    if chunk[:lead] not in (b"", b"\n") or (stop is not None and chunk[-1:] != b"\n"):
        raise DSparkJsonError(
            f"Input file {path} changed after it was listed: its rows no longer start "
            "where they did. Input files must not change once visible (write a new file "
            "under a hidden name, then rename it into place). Put the original back."
        )
    return chunk[lead:], skip


class _Cursor:
    """Where this process stopped reading a file as a stream: the piece holding the last row
    read (``row``: the number of its first row) and the rest of the stream. One at a time: the
    parts of a partition read one after the other continue it instead of decompressing the
    file again from its start."""

    _last: _Cursor | None = None
    _lock = threading.Lock()  # a driver may sample from several threads

    def __init__(
        self, path: str, version: tuple[int | None, int | None], storage: StorageSettings
    ) -> None:
        self.path = path
        self.version = version  # size and modification time when it was opened
        self.pieces = (_Piece(piece) for piece, _ in pieces(path, storage))
        self.row = 0
        self.held: list[_Piece] = []  # the piece read last, from row ``row`` on

    @classmethod
    def take(cls, path: str, start: int, end: int, storage: StorageSettings) -> tuple[bytes, int]:
        """:func:`text_from` without a window."""
        version = file_version(path, storage)
        with cls._lock:
            cursor = cls._last
            if (
                cursor is None
                or (cursor.path, cursor.version) != (path, version)
                or cursor.row > start
            ):
                if cursor is not None:
                    cursor.pieces.close()
                cursor = cls._last = cls(path, version, storage)
            try:
                return cursor._take(start, end)
            except BaseException:
                cursor.pieces.close()
                cls._last = None
                raise

    def _take(self, start: int, end: int) -> tuple[bytes, int]:
        row = self.row  # the first row of the next piece
        kept: list[_Piece] = []
        for piece in itertools.chain(self.held, self.pieces):
            if not kept and row + piece.rows <= start:
                row += piece.rows  # all before ``start``: passed over
                continue
            kept.append(piece)
            row += piece.rows
            if row >= end:
                break
        if not kept:  # the file ends first: the caller finds too few rows
            self.row, self.held = row, []
            return b"", 0
        head, last = kept[0], kept[-1]
        skip = start - (row - sum(piece.rows for piece in kept))
        self.row, self.held = row - last.rows, [last]  # its last piece may hold more rows
        # Only the bytes of rows [start, end), where the pieces know where their rows start.
        stop = None
        if last.starts is not None and end - self.row < last.rows:
            stop = int(last.starts[end - self.row])
        begin = 0
        if head.starts is not None:
            begin, skip = int(head.starts[skip]), 0
        if len(kept) == 1:
            return head.data[begin:stop], skip
        middle = [piece.data for piece in kept[1:-1]]
        return b"".join([head.data[begin:], *middle, last.data[:stop]]), skip


class _Piece:
    """A piece of a file's text, its row count and, where its lines end at LF or CRLF only,
    the byte where each of its rows starts."""

    __slots__ = ("data", "rows", "starts")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts: np.ndarray | None = None
        if data.count(b"\r") == data.count(b"\r\n"):
            self.starts = row_starts(data)
            self.rows = len(self.starts)
        else:
            self.rows = len(rows_of(data))
