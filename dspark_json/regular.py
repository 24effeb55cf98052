"""Opening a local file that a user or another machine can write (an input file, a journal
entry, a cache entry, a claim or lease, an endpoints file, a GCS key file) without trusting it:
the one definition, below every layer that reads such a file (``storage`` for the key file,
``fs`` for the rest, on any filesystem).

The file is opened with ``O_NONBLOCK`` (opening a FIFO to read then returns at once instead of
waiting for a writer, and ``requestDeadline`` cannot cut a blocked ``open``) and its type is
checked with ``fstat`` on the descriptor opened: no gap between a check and the open, so a file
swapped for a FIFO or a device after a listing is refused too (:class:`NotRegular`, nothing
read). What is read is bounded, as stored and decompressed (:class:`TooLarge`).
"""

from __future__ import annotations

import io
import os
import stat

import pyarrow as pa

from dspark_json.errors import mask_uris

__all__ = ["NotRegular", "RefusedFile", "TooLarge", "open_local", "read_local", "read_stream"]


class RefusedFile(OSError):
    """A file the source will not read: not a regular file (:class:`NotRegular`), or over the
    bytes allowed (:class:`TooLarge`). Its text names the file (credentials masked);
    :attr:`reason` says why without it, for a caller whose message names the file, or the
    option, itself."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{mask_uris(path)} is {reason}: it is not read")
        self.path, self.reason = path, reason


class NotRegular(RefusedFile):
    """The path names something other than a regular file (a FIFO, a device, a socket, a
    directory): never read. ``kind`` says which (``"a FIFO"``...)."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(path, f"not a regular file ({kind})")
        self.kind = kind


class TooLarge(RefusedFile):
    """The file holds more than ``limit`` bytes (``size``: as stored where known, else
    ``None``: it grew past the limit as read, or once decompressed)."""

    def __init__(self, path: str, limit: int, size: int | None, what: str) -> None:
        shown = f"{size} bytes {what}" if size is not None else f"more than {limit} bytes {what}"
        super().__init__(path, f"too large: {shown}, over the limit of {limit} bytes")
        self.limit, self.size = limit, size


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "of an unknown type"


def open_local(path: str, *, follow: bool = True) -> io.FileIO:
    """The regular file at the local ``path``, open for reading (unbuffered): opened with
    ``O_NONBLOCK`` and checked on its descriptor; with ``follow=False`` a symbolic link there
    is not followed (``O_NOFOLLOW``: an ``OSError``), for a file in a directory others can
    write. :class:`NotRegular` (nothing read), ``FileNotFoundError`` or another
    :class:`OSError`."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    descriptor = os.open(path, flags if follow else flags | os.O_NOFOLLOW)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(path, _kind(mode))
        return io.FileIO(descriptor, "rb", closefd=True)
    except BaseException:
        os.close(descriptor)
        raise


def read_local(
    path: str, limit: int | None = None, *, codec: str | None = None, shown: str | None = None
) -> bytes:
    """The content of the regular file at the local ``path`` (:func:`open_local`), at most
    ``limit`` bytes as stored and, decompressed with ``codec`` (pyarrow's name: ``"gzip"``...),
    at most ``limit`` bytes decompressed (a small ``.gz`` may hold gigabytes): no more than
    ``limit + 1`` bytes are ever held. :class:`TooLarge` names ``shown`` (else ``path``)."""
    name = path if shown is None else shown
    with open_local(path) as source:
        size = os.fstat(source.fileno()).st_size
        if limit is not None and size > limit:
            raise TooLarge(name, limit, size, "as stored")
        if codec is None:
            stream: pa.NativeFile = pa.PythonFile(source, mode="r")
        else:
            stream = pa.CompressedInputStream(pa.PythonFile(source, mode="r"), codec)
        return read_stream(stream, limit, name, decompressed=codec is not None)


def read_stream(
    stream: pa.NativeFile, limit: int | None, shown: str, *, decompressed: bool = False
) -> bytes:
    """All of ``stream``, or :class:`TooLarge` (naming ``shown``) where it holds more than
    ``limit`` bytes: no more than ``limit + 1`` are read."""
    data = bytes(stream.read() if limit is None else stream.read(limit + 1))
    if limit is not None and len(data) > limit:
        what = "once decompressed" if decompressed else "as read"
        raise TooLarge(shown, limit, None, what)
    return data
