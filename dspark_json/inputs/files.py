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
stopped (:class:`_Cursor`), so a task that reads a file's rows part after part (one task per
compressed file per micro-batch: :func:`~dspark_json.inputs.listing.plan_partitions`)
decompresses it once.

A file that cannot be read as what it claims to be (a truncated gzip stream, a ``.parquet`` that
is not Parquet) is an error naming the file, never rows that silently go missing: the stream must
not move past rows it could not read.
"""

from __future__ import annotations

import codecs
import datetime
import decimal
import itertools
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from dspark_json.buffers.compiled import kernel
from dspark_json.buffers.words import BLOCK, block_equal, copy_block, lowest_bit
from dspark_json.errors import DSparkJsonError
from dspark_json.fs import read_range, resolve

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

logger = logging.getLogger("dspark_json")

#: The listing remembers where every ``ROW_STRIDE``-th row of a plain text file starts.
ROW_STRIDE = 64
#: Bytes of a file read (or decompressed) at a time.
PIECE = 1 << 24

_TEXT_SUFFIXES = (".jsonl", ".ndjson", ".json")
_COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2")
_PARQUET_SUFFIX = ".parquet"
#: The file names read as input.
INPUT_SUFFIXES = (
    *_TEXT_SUFFIXES,
    *(text + packed for text in _TEXT_SUFFIXES for packed in _COMPRESSED_SUFFIXES),
    _PARQUET_SUFFIX,
)

_UTF8_BOM = b"\xef\xbb\xbf"
#: First bytes of a line that may still be blank: whitespace, and a BOM's first byte.
_MAYBE_BLANK = np.array([9, 11, 12, 13, 32, 0xEF], np.uint8)
#: Longest first: UTF-32-LE's BOM starts with UTF-16-LE's.
_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_FIX = (
    "Replace it with a complete file, or move it out of the directory (or rename it with a "
    "leading '_') so the stream can go on without it."
)


def rows_of(data: bytes) -> list[bytes]:
    """The non-blank lines of JSON lines text: its rows (a UTF-8 BOM opening a line dropped)."""
    if _UTF8_BOM in data:
        lines = [line.removeprefix(_UTF8_BOM) for line in data.splitlines()]
        return [line for line in lines if line.strip()]
    return [line for line in data.splitlines() if line.strip()]


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


def index_rows(path: str) -> RowIndex:
    """The row count of the file at ``path`` and, where it is plain text, its row index
    (driver side, when the file is first listed): read as a stream, a piece at a time."""
    if path.endswith(_PARQUET_SUFFIX):
        with _parquet(path) as parquet:
            return RowIndex(int(parquet.metadata.num_rows))
    rows, position, plain = 0, 0, True
    starts: list[np.ndarray] = []
    for piece, stored in _pieces(path):
        if plain and (not stored or piece.count(b"\r") != piece.count(b"\r\n")):
            plain = False  # decoded, or lone CR line ends: read from the start, no index
            starts = []
        if plain:
            found = _row_starts(piece)
            starts.append(found[(-rows) % ROW_STRIDE :: ROW_STRIDE] + position)
            rows += len(found)
        else:
            rows += _count_rows(piece)
        position += len(piece)
    if not plain:
        return RowIndex(rows)
    return RowIndex(rows, tuple(np.concatenate(starts).tolist()) if starts else ())


def _count_rows(piece: bytes) -> int:
    """How many rows the text ``piece`` holds (as :func:`rows_of` counts them)."""
    if b"\r" not in piece:
        return len(_row_starts(piece))
    return len(rows_of(piece))


def _row_starts(text: bytes) -> np.ndarray:
    """Where each row of ``text`` (lines split at LF, as :func:`rows_of` takes them when no lone
    CR ends one) starts. A line whose first byte is not blank is a row; the few others (a
    space, a BOM, a CR first) are looked at one by one."""
    data = np.frombuffer(text, np.uint8)
    breaks = np.flatnonzero(data == 10)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(data)]])
    empty = starts >= ends
    first = data[np.minimum(starts, max(len(data) - 1, 0))] if len(data) else starts
    unsure = ~empty & np.isin(first, _MAYBE_BLANK)
    row = ~empty & ~unsure
    for line in np.flatnonzero(unsure).tolist():
        row[line] = bool(text[starts[line] : ends[line]].removeprefix(_UTF8_BOM).strip())
    return starts[row]


def file_rows(
    path: str, start: int, end: int, window: tuple[int, int | None, int] | None = None
) -> list[bytes]:
    """Rows ``[start, end)`` of the file at ``path`` (fewer where it holds fewer); only the
    bytes of ``window`` (:meth:`RowIndex.window`) where it is given."""
    if path.endswith(_PARQUET_SUFFIX):
        return _parquet_rows(path, start, end)
    text, skip = _text_from(path, start, end, window)
    return rows_of(text)[skip : skip + end - start]


def packed_rows(
    path: str, start: int, end: int, window: tuple[int, int | None, int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`file_rows` packed end to end, without a Python object per row: their bytes and
    ``offsets`` (row ``i`` is ``data[offsets[i]:offsets[i + 1]]``), as Arrow lays out text."""
    if path.endswith(_PARQUET_SUFFIX):
        rows = _parquet_rows(path, start, end)
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(row) for row in rows], out=offsets[1:])
        return np.frombuffer(b"".join(rows), np.uint8), offsets
    text, skip = _text_from(path, start, end, window)
    return pack_rows(text, skip, end - start)


def pack_rows(text: bytes, skip: int, take: int) -> tuple[np.ndarray, np.ndarray]:
    """``rows_of(text)[skip:skip + take]`` packed end to end: the rows' bytes and offsets.

    The same rows as :func:`rows_of`: lines end at LF, CR or CRLF (the blank line between a CR
    and an LF is not a row anyway), a UTF-8 BOM opening a line is dropped, and a line of
    spaces, tabs, VT and FF only is blank. Compiled, 64 bytes at a time: faster than Arrow's
    split and than numpy's search with a byte loop's copy (figures: benchmarks/README.md)."""
    data = np.frombuffer(text, np.uint8)
    ends = _line_ends(data, b"\r" not in text)
    return _pack(data, ends, max(skip, 0), max(take, 0))


@kernel
def _line_ends(data: np.ndarray, lone_lf: bool) -> np.ndarray:
    """Where the lines of ``data`` end: each LF, and each CR unless ``lone_lf``."""
    found = 0
    for counting in (True, False):
        if not counting:
            ends = np.empty(found, np.int64)
        k = pos = 0
        while pos <= len(data) - BLOCK:
            mask = block_equal(data, pos, 10)
            if not lone_lf:
                mask |= block_equal(data, pos, 13)
            while mask:
                if not counting:
                    ends[k] = pos + lowest_bit(mask)
                k += 1
                mask &= mask - np.uint64(1)
            pos += BLOCK
        for i in range(pos, len(data)):
            if data[i] == 10 or (data[i] == 13 and not lone_lf):
                if not counting:
                    ends[k] = i
                k += 1
        found = k
    return ends


@kernel
def _pack(
    data: np.ndarray, ends: np.ndarray, skip: int, take: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pack_rows` of ``data`` whose lines end at ``ends``; each row copied a block at a
    time (a block may write past its end: the next row, or the block of slack, takes it)."""
    out = np.empty(len(data) + BLOCK, np.uint8)
    offsets = np.zeros(take + 1, np.int64)
    rows = 0
    size = 0
    i = 0
    for line in range(len(ends) + 1):
        if rows >= take:
            break
        j = ends[line] if line < len(ends) else len(data)
        s = i
        i = j + 1
        if j - s >= 3 and data[s] == 0xEF and data[s + 1] == 0xBB and data[s + 2] == 0xBF:
            s += 3
        blank = True
        for k in range(s, j):
            if data[k] not in (32, 9, 11, 12):
                blank = False
                break
        if blank:
            continue
        if skip > 0:
            skip -= 1
            continue
        shift = size - s  # data[k] goes to out[k + shift]
        k = s
        while k < j and k + BLOCK <= len(data):
            copy_block(data, k, out, k + shift)
            k += BLOCK
        while k < j:
            out[k + shift] = data[k]
            k += 1
        size += j - s
        rows += 1
        offsets[rows] = size
    return out[:size], offsets[: rows + 1]


def _text_from(
    path: str, start: int, end: int, window: tuple[int, int | None, int] | None
) -> tuple[bytes, int]:
    """Text that holds the file's rows ``[start, end)``, and how many rows of it come before
    row ``start``: the bytes of ``window`` where it is given, else the pieces of the file's
    stream that hold them (read from where this process last stopped in it, when that is
    before ``start``)."""
    if window is None:
        return _Cursor.take(path, start, end)
    first, stop, skip = window
    lead = 1 if first > 0 else 0  # the line end before the first row, read to check it
    chunk = read_range(path, first - lead, stop)
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

    def __init__(self, path: str, version: tuple[int | None, int | None]) -> None:
        self.path = path
        self.version = version  # size and modification time when it was opened
        self.pieces = (_Piece(piece) for piece, _ in _pieces(path))
        self.row = 0
        self.held: list[_Piece] = []  # the piece read last, from row ``row`` on

    @classmethod
    def take(cls, path: str, start: int, end: int) -> tuple[bytes, int]:
        """:func:`_text_from` without a window."""
        version = _version(path)
        with cls._lock:
            cursor = cls._last
            if (
                cursor is None
                or (cursor.path, cursor.version) != (path, version)
                or cursor.row > start
            ):
                if cursor is not None:
                    cursor.pieces.close()
                cursor = cls._last = cls(path, version)
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
            self.starts = _row_starts(data)
            self.rows = len(self.starts)
        else:
            self.rows = len(rows_of(data))


def _version(path: str) -> tuple[int | None, int | None]:
    """The size and modification time of the file at ``path`` (``FileNotFoundError`` where
    there is none)."""
    fs, inner = resolve(path)
    info = fs.get_file_info(inner)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(path)
    return info.size, info.mtime_ns


def _pieces(path: str) -> Iterator[tuple[bytes, bool]]:
    """The file's JSON lines as UTF-8 text, about :data:`PIECE` bytes at a time, each piece
    ending at a line end (but the last); with whether it is the file's bytes as stored (not
    decompressed, not re-encoded)."""
    carry = b""
    stored = True
    for chunk, stored in _decoded(path):
        data = carry + chunk if carry else chunk
        # After the last LF; or, with none, after the last CR that is not the data's last byte
        # (a CR at the end may be a CRLF's first half).
        cut = data.rfind(b"\n") + 1 or data.rfind(b"\r", 0, len(data) - 1) + 1
        if cut == 0:
            carry = data  # one line longer than a piece: it is all one row
            continue
        carry = data[cut:]
        yield data[:cut], stored
    if carry:
        yield carry, stored


def _decoded(path: str) -> Iterator[tuple[bytes, bool]]:
    """The file's content as UTF-8, :data:`PIECE` bytes (of the stream read) at a time:
    decompressed, wide encodings re-encoded; with whether that is the bytes as stored."""
    fs, inner = resolve(path)
    with fs.open_input_file(inner) as source:
        codec = _codec_of(source.read(16))
        source.seek(0)
        stream: Any = source
        if codec is not None:
            logger.debug("Decompressing input file %s (%s) from its start", path, codec)
            stream = pa.CompressedInputStream(source, codec)
        try:
            chunk = stream.read(max(PIECE, 4))  # a byte-order mark whole
            decoder = None
            for bom, encoding in _WIDE_BOMS:
                if chunk.startswith(bom):
                    decoder = codecs.getincrementaldecoder(encoding)()
                    chunk = chunk[len(bom) :]
                    break
            stored = codec is None and decoder is None
            done = 0
            while True:
                if chunk:
                    text = chunk if decoder is None else _reencode(decoder, chunk, path, done)
                    yield text, stored
                    done += len(chunk)
                chunk = stream.read(PIECE)
                if not chunk:
                    break
            if decoder is not None:
                rest = _reencode(decoder, b"", path, done, final=True)
                if rest:
                    yield rest, stored
        except OSError as exc:
            if codec is None or isinstance(exc, FileNotFoundError):
                raise
            raise DSparkJsonError(
                f"Input file {path} starts as a {codec} stream but cannot be decompressed "
                f"({exc}). {_FIX}"
            ) from exc
        finally:
            if stream is not source:
                stream.close()


def _reencode(
    decoder: codecs.IncrementalDecoder, chunk: bytes, path: str, done: int, *, final: bool = False
) -> bytes:
    """``chunk`` of a UTF-16/32 file (``done`` bytes of it before) as UTF-8."""
    try:
        return decoder.decode(chunk, final).encode("utf-8")
    except UnicodeDecodeError as exc:
        encoding = exc.encoding
        raise DSparkJsonError(
            f"Input file {path} starts with a {encoding} byte-order mark but is not "
            f"{encoding} text ({exc.reason} at byte {done + exc.start}). {_FIX}"
        ) from exc


def _codec_of(data: bytes) -> str | None:
    """The compression of ``data`` by its magic bytes (no JSON text starts with them)."""
    if data.startswith(b"\x1f\x8b"):
        return "gzip"
    if data.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    if data.startswith(b"BZh") and data[3:4].isdigit() and data[4:10] == b"1AY&SY":
        return "bz2"
    return None


@contextmanager
def _parquet(path: str) -> Iterator[Any]:
    """The Parquet file at ``path``, open for reading; an error naming it where it is not one."""
    import pyarrow.parquet as pq

    fs, inner = resolve(path)
    with fs.open_input_file(inner) as source:
        try:
            parquet = pq.ParquetFile(source)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DSparkJsonError(
                f"Input file {path} is named .parquet but is not a Parquet file ({exc}). {_FIX}"
            ) from exc
        yield parquet


def _parquet_rows(path: str, start: int, end: int) -> list[bytes]:
    """Rows ``[start, end)`` of a Parquet file as JSON objects, reading only the row groups
    that hold them."""
    with _parquet(path) as parquet:
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
