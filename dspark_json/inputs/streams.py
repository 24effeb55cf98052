"""A file's content as UTF-8 text, read as a stream a piece at a time: its compression told by
its magic bytes (gzip, zstd, bzip2: no JSON text starts with them), decompressed; a UTF-16 or
UTF-32 file with a byte-order mark re-encoded as UTF-8; each piece cut at a line end. A stream
that cannot be read as what it claims to be is an error naming the file."""

from __future__ import annotations

import codecs
import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from dspark_json.errors import DSparkJsonError
from dspark_json.fs import RefusedFile, open_regular, resolve
from dspark_json.storage import StorageSettings

__all__ = ["PIECE", "REPLACE_FIX", "file_version", "open_input", "pieces"]

logger = logging.getLogger("dspark_json")

#: Bytes of a file read (or decompressed) at a time.
PIECE = 1 << 24

#: Longest first: UTF-32-LE's BOM starts with UTF-16-LE's.
_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
#: How to go on past an input file that cannot be read.
REPLACE_FIX = (
    "Replace it with a complete file, or move it out of the directory (or rename it with a "
    "leading '_') so the stream can go on without it."
)


def file_version(path: str, storage: StorageSettings) -> tuple[int | None, int | None]:
    """The size and modification time of the file at ``path`` (``FileNotFoundError`` where
    there is none)."""
    fs, inner = resolve(path, storage)
    info = fs.get_file_info(inner)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(path)
    return info.size, info.mtime_ns


def pieces(path: str, storage: StorageSettings) -> Iterator[tuple[bytes, bool]]:
    """The file's JSON lines as UTF-8 text, about :data:`PIECE` bytes at a time, each piece
    ending at a line end (but the last); with whether it is the file's bytes as stored (not
    decompressed, not re-encoded)."""
    carry = b""
    stored = True
    for chunk, stored in _decoded(path, storage):
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


def _decoded(path: str, storage: StorageSettings) -> Iterator[tuple[bytes, bool]]:
    """The file's content as UTF-8, :data:`PIECE` bytes (of the stream read) at a time:
    decompressed, wide encodings re-encoded; with whether that is the bytes as stored."""
    fs, inner = resolve(path, storage)
    with open_input(fs, inner, path) as source:
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
                f"({exc}). {REPLACE_FIX}"
            ) from exc
        finally:
            if stream is not source:
                stream.close()


def open_input(fs: pafs.FileSystem, inner: str, path: str) -> pa.NativeFile:
    """The input file ``path`` (``inner`` on ``fs``) open for reading (:func:`open_regular`);
    an error naming it where it is no longer a regular file: the listing skips FIFOs and
    devices, but one may take a listed file's place before it is read (opening it would block
    the task for good)."""
    try:
        return open_regular(fs, inner)
    except RefusedFile as exc:
        raise DSparkJsonError(f"Input file {exc}. {REPLACE_FIX}") from None


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
            f"{encoding} text ({exc.reason} at byte {done + exc.start}). {REPLACE_FIX}"
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
