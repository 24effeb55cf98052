"""Reading a file that a user or another machine can write (a cache entry, a claim, a lease,
an endpoints file) without trusting it: its type checked before anything is read from it, and
what is read bounded, as stored and as decompressed.

On a local filesystem the file is opened with ``O_NONBLOCK`` (opening a FIFO for reading then
returns at once instead of waiting for a writer) and checked with ``fstat`` on the descriptor
opened, so that a file swapped for a FIFO or a device between a check and the open is still
refused. On other filesystems (object stores, HDFS) the type is the store's
(``get_file_info``): an object store holds nothing but objects.
"""

from __future__ import annotations

import os
import stat

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = ["NotRegular", "TooLarge", "read_regular"]


class NotRegular(OSError):
    """The path names something other than a regular file (a FIFO, a device, a socket, a
    directory): never read."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"not a regular file ({kind})")
        self.kind = kind


class TooLarge(OSError):
    """The file holds more than the bound (``size``: as stored where known, else ``None``: it
    grew past the bound once decompressed)."""

    def __init__(self, limit: int, size: int | None, what: str) -> None:
        shown = f"{size} bytes {what}" if size is not None else f"more than {limit} bytes {what}"
        super().__init__(f"{shown}, over the limit of {limit} bytes")
        self.limit, self.size = limit, size


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISLNK, "symbolic link"),
    ):
        if test(mode):
            return name
    return "unknown type"


def read_regular(
    path: str,
    limit: int,
    *,
    fs: pafs.FileSystem | None = None,
    decompress: bool = False,
) -> bytes:
    """The content of the regular file at ``path`` (on ``fs``; ``None``: the local
    filesystem), at most ``limit`` bytes as stored and, with ``decompress`` (by the name's
    extension: ``.gz``, ``.bz2``, ``.zst``...), at most ``limit`` bytes decompressed.

    Raises :class:`NotRegular` (nothing read), :class:`TooLarge` (at most ``limit + 1``
    bytes read), :class:`FileNotFoundError` or another :class:`OSError`."""
    codec = _codec(path) if decompress else None
    if fs is None or fs.type_name == "local":
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            info = os.fstat(descriptor)
        except OSError:
            os.close(descriptor)
            raise
        if not stat.S_ISREG(info.st_mode):
            os.close(descriptor)
            raise NotRegular(_kind(info.st_mode))
        with os.fdopen(descriptor, "rb", buffering=0) as source:
            if info.st_size > limit:
                raise TooLarge(limit, info.st_size, "as stored")
            if codec is None:
                data = source.read(limit + 1)
            else:
                with pa.CompressedInputStream(pa.PythonFile(source, mode="r"), codec) as stream:
                    data = stream.read(limit + 1)
    else:
        found = fs.get_file_info(path)
        if found.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"no such file: {path}")
        if found.type != pafs.FileType.File:
            raise NotRegular(found.type.name)
        if found.size is not None and found.size > limit:
            raise TooLarge(limit, found.size, "as stored")
        with fs.open_input_stream(path, compression=codec) as stream:
            data = stream.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(limit, None, "decompressed" if codec is not None else "as read")
    return bytes(data)


def _codec(path: str) -> str | None:
    """The compression a file's name says (pyarrow's codec name), ``None`` where none."""
    try:
        return str(pa.Codec.detect(path).name)
    except (ValueError, TypeError, pa.ArrowException):
        return None
