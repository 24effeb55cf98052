"""Paths the executors touch, resolved through pyarrow's filesystems (local, s3://, gs://, ...).

No bare ``open()`` anywhere else: on a cluster the prompt input, the journal and the table live on
shared storage, and pyarrow knows how to reach it.

An object store's URI (``s3://``, ``gs://``, ``abfss://``, ``az://``...) is reached with the
query's :class:`~dspark_json.storage.StorageSettings` (option ``storageOptions`` over the
environment variables), which every function here takes: the one set of settings, carried with
the options to the executors. A URI never carries a query string here: paths are appended to
a directory URI, so ``?...`` would land before them (:func:`query_problem` is the one rule).

A URI may carry credentials (``s3://user:secret@bucket``, a SAS token's ``sig=``): :func:`mask_uris`
is the one place that hides them in a text (every message, log line and ``repr`` that shows a
URI option passes through it, :func:`dspark_json.http.secrets.redact` too), and a directory
option's value is a :class:`Location`, whose ``repr`` is masked.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import uuid
from collections.abc import Callable
from typing import Literal, ParamSpec, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from dspark_json.errors import MASK, mask_uris
from dspark_json.regular import (
    NotRegular,
    RefusedFile,
    TooLarge,
    open_local,
    read_local,
    read_stream,
)
from dspark_json.storage import StorageSettings, filesystem

__all__ = [
    "MASK",
    "FileEntry",
    "Location",
    "NotRegular",
    "RefusedFile",
    "TooLarge",
    "check_writable",
    "is_remote_uri",
    "kind_of",
    "list_files",
    "mask_uris",
    "masked_copy",
    "open_regular",
    "query_problem",
    "read_bytes",
    "read_range",
    "read_regular",
    "read_text",
    "remove",
    "resolve",
    "write_atomic",
]

#: Filesystems with real directories; on object stores (s3, gcs, abfs) a "directory" is only a
#: name prefix, which exists once an object has it.
_REAL_DIRECTORIES = frozenset({"local", "hdfs"})


class Location(str):
    """A directory option's value (a path or URI): the string itself, for every use, but its
    ``repr`` (an options object's, a plan's) masks its credentials."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(mask_uris(str(self)))

    def __reduce__(self) -> tuple[type[Location], tuple[str]]:
        return (Location, (str(self),))


def is_remote_uri(path: str) -> bool:
    """True for ``scheme://...`` URIs other than ``file://``."""
    return "://" in path and not path.startswith("file://")


def query_problem(option: str, uri: str) -> str | None:
    """Why ``uri`` (the value of ``option``) cannot be a directory, or ``None``: a remote URI
    with a query string (``?sig=...``), after which every file name would be appended."""
    if not is_remote_uri(uri) or not ("?" in uri or "#" in uri):
        return None
    return (
        f"Option {option!r} is a URI with a query string or fragment ({mask_uris(uri)}): file "
        "names are appended to it, so they would land after it. Give the URI without it, and the "
        "store's endpoint and credentials in option 'storageOptions' (e.g. "
        '\'{"aws_endpoint_url": "http://127.0.0.1:9000"}\', '
        '\'{"azure_storage_sas_token": "..."}\'; docs/guide/object-stores.md)'
    )


def resolve(uri: str, storage: StorageSettings) -> tuple[pafs.FileSystem, str]:
    """The filesystem that holds ``uri`` and the path inside it; an object store's built from
    ``storage``."""
    if "://" in uri:
        masked: BaseException | None = None
        try:
            found = filesystem(uri, storage)
            if found is None:
                fs, path = pafs.FileSystem.from_uri(uri)
                return fs, str(path)
            return found
        except (OSError, ValueError, pa.ArrowException) as exc:  # pyarrow's, quoting the URI
            masked = masked_copy(exc)
        # Raised after the except block: the unmasked error is not its __context__.
        raise masked
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def masked_copy(exc: BaseException) -> BaseException:
    """``exc`` with the credentials in its text masked: ``exc`` itself where there are none,
    else a new one of its type, without ``exc`` as its cause. pyarrow's errors that are neither
    an :class:`OSError` nor a :class:`ValueError` (Azure without credentials, an account key
    that is not base64: ``ArrowException``, ``ArrowNotImplementedError``...) become an
    :class:`OSError`, which every caller handles. Raise the copy outside the ``except`` block
    that caught ``exc``, so that ``exc`` is not its ``__context__`` either."""
    text = mask_uris(str(exc))
    if isinstance(exc, (OSError, ValueError)):
        if text == str(exc):
            return exc
        try:
            copy: BaseException = type(exc)(text)
        except TypeError:  # a constructor that wants more arguments
            copy = OSError(text)
    else:
        copy = OSError(text)
    copy.__suppress_context__ = True
    return copy


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _masking(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """``function`` with the errors pyarrow raises re-raised masked: they quote the request URL
    whole (Azure's quote a SAS token's ``sig=`` in its query), and a caller's message or a
    traceback's chained cause would show it."""

    @functools.wraps(function)
    def masked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        caught: BaseException | None = None
        try:
            return function(*args, **kwargs)
        except (OSError, pa.ArrowException) as exc:
            caught = masked_copy(exc)
            if caught is exc:
                raise
        # Raised after the except block: the unmasked error is not its __context__.
        raise caught

    return masked


class FileEntry:
    """A file in a listed directory: its name (relative to the directory), path, size and
    modification time (nanoseconds; ``None`` where the store does not say)."""

    __slots__ = ("modified", "name", "path", "size")

    def __init__(self, name: str, path: str, size: int, modified: int | None = None) -> None:
        self.name = name
        self.path = path
        self.size = size
        self.modified = modified

    def __repr__(self) -> str:
        return f"FileEntry({self.name!r}, size={self.size})"


@_masking
def list_files(
    directory: str, *, storage: StorageSettings, suffixes: tuple[str, ...]
) -> list[FileEntry]:
    """Files directly in ``directory`` ending in one of ``suffixes``, sorted by name.

    Names starting with ``.`` or ``_`` are skipped, as in Spark's file sources: a writer puts a
    file in place atomically by writing ``.name.tmp`` (or ``_name``) and renaming it.
    """
    fs, root = resolve(directory, storage)
    infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True, recursive=False))
    entries = []
    for info in infos:
        name = info.base_name
        if info.type != pafs.FileType.File or name.startswith((".", "_")):
            continue
        if not name.endswith(suffixes):
            continue
        uri = directory.rstrip("/") + "/" + name
        entries.append(FileEntry(name, uri, info.size or 0, info.mtime_ns))
    entries.sort(key=lambda e: e.name)
    return entries


@_masking
def kind_of(uri: str, *, storage: StorageSettings) -> Literal["directory", "file", "missing"]:
    """What is at ``uri``. On an object store a prefix no object has yet is a ``directory``:
    files may land under it later, and there is no directory to create first."""
    fs, root = resolve(uri, storage)
    found = fs.get_file_info(root).type
    if found == pafs.FileType.File:
        return "file"
    if found == pafs.FileType.Directory or fs.type_name not in _REAL_DIRECTORIES:
        return "directory"
    return "missing"


def open_regular(fs: pafs.FileSystem, path: str) -> pa.NativeFile:
    """The regular file at ``path`` on ``fs``, open for reading (random access), for a file a
    user or another machine can write (an input file, a journal entry, a cache entry, a claim,
    an endpoints file): the one way such a file is opened.

    On a local filesystem it is opened with ``O_NONBLOCK`` (opening a FIFO to read then returns
    at once instead of waiting for a writer, which ``requestDeadline`` could not cut) and its
    type checked with ``fstat`` on the descriptor opened: a file swapped for a FIFO or a device
    between a look and the open is refused too (:class:`NotRegular`, nothing read).
    ``FileNotFoundError`` where nothing is there. Elsewhere (object stores, HDFS: no FIFO or
    device there) nothing is asked first, so it costs no request."""
    if fs.type_name != "local":
        return fs.open_input_file(path)
    return pa.PythonFile(open_local(path), mode="r")


def read_regular(
    fs: pafs.FileSystem,
    path: str,
    limit: int | None = None,
    *,
    decompress: bool = False,
    shown: str | None = None,
) -> bytes:
    """The content of the regular file at ``path`` on ``fs`` (:func:`open_regular`), at most
    ``limit`` bytes as stored and, with ``decompress`` (by the name's extension: ``.gz``,
    ``.bz2``, ``.zst``...), at most ``limit`` bytes decompressed (a small ``.gz`` may hold
    gigabytes): no more than ``limit + 1`` bytes are ever held. With a ``limit``, on an
    object store the size it says is checked before anything is read (one request).

    Raises :class:`NotRegular`, :class:`TooLarge` (naming ``shown``, else ``path``),
    :class:`FileNotFoundError` or another :class:`OSError`."""
    name = path if shown is None else shown
    codec = _codec(path) if decompress else None
    if fs.type_name == "local":
        return read_local(path, limit, codec=codec, shown=name)
    if limit is not None:
        found = fs.get_file_info(path)
        if found.type == pafs.FileType.NotFound:
            raise FileNotFoundError(errno.ENOENT, "no such file", name)
        if found.type != pafs.FileType.File:
            kind = "a directory" if found.type == pafs.FileType.Directory else "not a file"
            raise NotRegular(name, kind)
        if found.size is not None and found.size > limit:
            raise TooLarge(name, limit, found.size, "as stored")
    with fs.open_input_stream(path, compression=codec) as stream:
        return read_stream(stream, limit, name, decompressed=codec is not None)


def _codec(path: str) -> str | None:
    """The compression a file's name says (pyarrow's codec name, as ``compression="detect"``
    finds it), ``None`` where none."""
    try:
        found = pa.Codec.detect(path)
    except (TypeError, ValueError, pa.ArrowException):  # no codec's suffix: TypeError
        return None
    return str(found.name) if found is not None else None


@_masking
def read_bytes(
    uri: str, *, storage: StorageSettings, decompress: bool = True, limit: int | None = None
) -> bytes:
    """The whole content of one file (decompressed where its name ends in ``.gz``, ``.bz2``,
    ``.zst``..., unless ``decompress`` is false: then the bytes as stored):
    :func:`read_regular`, at most ``limit`` bytes (:class:`RefusedFile` past them)."""
    fs, path = resolve(uri, storage)
    return read_regular(fs, path, limit, decompress=decompress, shown=uri)


@_masking
def read_range(uri: str, start: int, end: int | None, *, storage: StorageSettings) -> bytes:
    """Bytes ``[start, end)`` of one file as stored (``end`` None: to its end); a ranged read
    on object stores."""
    fs, path = resolve(uri, storage)
    with open_regular(fs, path) as source:
        stop = source.size() if end is None else min(end, source.size())
        data: bytes = source.read_at(max(stop - start, 0), start)
    return data


def read_text(uri: str, *, storage: StorageSettings, limit: int | None = None) -> str:
    """The whole content of one UTF-8 text file (:func:`read_bytes`: ``limit`` bytes at most)."""
    return read_bytes(uri, storage=storage, limit=limit).decode("utf-8")


@_masking
def write_atomic(directory: str, name: str, data: bytes, *, storage: StorageSettings) -> None:
    """Put ``data`` at ``directory/name`` at once, replacing a file of that name. On a local or
    HDFS filesystem: written under a hidden name, then renamed (readers that skip names starting
    with ``.`` never see a partial file). On an object store one PUT is atomic already, and
    there is no rename (a flat Azure account has no ``Move()``): the object is written at its
    name directly."""
    fs, root = resolve(directory, storage)
    if not _renames(fs):
        with fs.open_output_stream(f"{root}/{name}") as sink:
            sink.write(data)
        return
    fs.create_dir(root, recursive=True)
    temporary = f"{root}/.{name}.{uuid.uuid4().hex}.tmp"
    try:
        with fs.open_output_stream(temporary) as sink:
            sink.write(data)
        fs.move(temporary, f"{root}/{name}")
    except BaseException:
        with contextlib.suppress(OSError):  # a full disk, a rename refused: none left behind
            fs.delete_file(temporary)
        raise


@_masking
def remove(uri: str, *, storage: StorageSettings) -> None:
    """Delete the file at ``uri``; one already gone is no error."""
    fs, path = resolve(uri, storage)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def _renames(fs: pafs.FileSystem) -> bool:
    """Whether writes on ``fs`` go through a rename (filesystems with real directories)."""
    return fs.type_name in _REAL_DIRECTORIES


@_masking
def check_writable(directory: str, *, storage: StorageSettings) -> None:
    """Do in ``directory`` what the writes will do, on a hidden probe file: create the
    directory where needed, write the probe under a temporary name and rename it (local, HDFS)
    or write it at its name (object stores), then delete it. ``OSError`` (pyarrow's, with the
    path) when any step fails."""
    fs, root = resolve(directory, storage)
    probe = f"{root}/.dspark-json-probe-{uuid.uuid4().hex}"
    if not _renames(fs):
        with fs.open_output_stream(probe) as sink:
            sink.write(b"")
        fs.delete_file(probe)
        return
    fs.create_dir(root, recursive=True)
    with fs.open_output_stream(f"{probe}.tmp") as sink:
        sink.write(b"")
    try:
        fs.move(f"{probe}.tmp", probe)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.delete_file(f"{probe}.tmp")
        raise
    fs.delete_file(probe)
