"""Paths the executors touch, resolved through pyarrow's filesystems (local, s3://, gs://, ...).

No bare ``open()`` anywhere else: on a cluster the prompt input, the journal and the table live on
shared storage, and pyarrow knows how to reach it.
"""

from __future__ import annotations

import os
import uuid
from typing import Literal

import pyarrow.fs as pafs

__all__ = [
    "FileEntry",
    "check_writable",
    "is_remote_uri",
    "kind_of",
    "list_files",
    "read_bytes",
    "read_text",
    "resolve",
    "write_atomic",
]

#: Filesystems with real directories; on object stores (s3, gcs, abfs) a "directory" is only a
#: name prefix, which exists once an object has it.
_REAL_DIRECTORIES = frozenset({"local", "hdfs"})


def is_remote_uri(path: str) -> bool:
    """True for ``scheme://...`` URIs other than ``file://``."""
    return "://" in path and not path.startswith("file://")


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem that holds ``uri`` and the path inside it."""
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, str(path)
    return pafs.LocalFileSystem(), os.path.abspath(uri)


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


def list_files(directory: str, *, suffixes: tuple[str, ...]) -> list[FileEntry]:
    """Files directly in ``directory`` ending in one of ``suffixes``, sorted by name.

    Names starting with ``.`` or ``_`` are skipped, as in Spark's file sources: a writer puts a
    file in place atomically by writing ``.name.tmp`` (or ``_name``) and renaming it.
    """
    fs, root = resolve(directory)
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


def kind_of(uri: str) -> Literal["directory", "file", "missing"]:
    """What is at ``uri``. On an object store a prefix no object has yet is a ``directory``:
    files may land under it later, and there is no directory to create first."""
    fs, root = resolve(uri)
    found = fs.get_file_info(root).type
    if found == pafs.FileType.File:
        return "file"
    if found == pafs.FileType.Directory or fs.type_name not in _REAL_DIRECTORIES:
        return "directory"
    return "missing"


def read_bytes(uri: str, *, decompress: bool = True) -> bytes:
    """The whole content of one file (decompressed where its name ends in ``.gz``, ``.bz2``,
    ``.zst``..., unless ``decompress`` is false: then the bytes as stored)."""
    fs, path = resolve(uri)
    with fs.open_input_stream(path, compression="detect" if decompress else None) as stream:
        data: bytes = stream.read()
    return data


def read_range(uri: str, start: int, end: int | None) -> bytes:
    """Bytes ``[start, end)`` of one file as stored (``end`` None: to its end); a ranged read
    on object stores."""
    fs, path = resolve(uri)
    with fs.open_input_file(path) as source:
        stop = source.size() if end is None else min(end, source.size())
        data: bytes = source.read_at(max(stop - start, 0), start)
    return data


def read_text(uri: str) -> str:
    """The whole content of one UTF-8 text file."""
    return read_bytes(uri).decode("utf-8")


def write_atomic(directory: str, name: str, data: bytes) -> None:
    """Put ``data`` at ``directory/name`` at once: written under a hidden name, then renamed
    (readers that skip names starting with ``.`` never see a partial file). Replaces a file of
    the same name."""
    fs, root = resolve(directory)
    fs.create_dir(root, recursive=True)
    temporary = f"{root}/.{name}.{uuid.uuid4().hex}.tmp"
    with fs.open_output_stream(temporary) as sink:
        sink.write(data)
    fs.move(temporary, f"{root}/{name}")


def check_writable(directory: str) -> None:
    """Create ``directory`` where needed, then write and delete a hidden probe file in it:
    ``OSError`` (pyarrow's, with the path) when either fails."""
    fs, root = resolve(directory)
    fs.create_dir(root, recursive=True)
    probe = f"{root}/.dspark-json-probe-{uuid.uuid4().hex}"
    with fs.open_output_stream(probe) as sink:
        sink.write(b"")
    fs.delete_file(probe)
