"""One ``/metrics`` reading per machine, not per task (option ``maxServerQueue``).

:class:`~dspark_json.http.gauges.Gauges` fetches an endpoint's ``/metrics`` at most once a
second per worker process; each Spark task running at once is a process of its own, so a
machine with 32 task slots would read each replica 32 times a second, and a cluster of 200
cores 200 times (vLLM renders ``/metrics`` in its API server process). :func:`shared` wraps a
task's fetch so that the tasks of one machine share one: the last answer is kept in a small
file in a machine-local directory (:func:`directory`: the system's temp directory, one per
user, mode 0700), named by the sha256 of the endpoint's URL (no credentials in it), and a task
whose reading is older than :data:`FRESH_S` takes the file's ``flock`` and fetches, while the
others use the file. So each endpoint's ``/metrics`` is read at most about once per
:data:`FRESH_S` per machine, whatever the number of tasks. Where the directory cannot be used
(read-only, another user's), each task fetches on its own, as before.

The gauges are the server's load, not a secret; the body is bounded as the fetch bounds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import stat
import struct
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

__all__ = ["FRESH_S", "directory", "shared"]

logger = logging.getLogger("dspark_json")

#: A machine's reading younger than this is used as is (seconds, wall clock).
FRESH_S = 0.9
#: How long a task waits for another task's fetch before it fetches on its own.
_WAIT_S = 2.5
_POLL_S = 0.05
#: Bytes of a reading read back at most (the fetch bounds the body well under this).
_MOST = 64 << 20
_HEAD = struct.Struct("<dH")  # when fetched (time.time()), status

Fetch = Callable[[int], Awaitable[tuple[int, bytes]]]


def directory() -> Path | None:
    """The machine-local directory of the shared readings (made where missing); ``None`` where
    it cannot be used."""
    path = Path(tempfile.gettempdir()) / f"dspark-json-metrics-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()  # a symbolic link planted there by another user is not followed
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None  # not ours alone: each task fetches on its own
    except OSError:
        return None
    return path


def shared(url: str, fetch: Fetch, where: Path | None = None) -> Fetch:
    """``fetch`` of ``url``'s ``/metrics``, shared by the tasks of this machine through a file
    in ``where`` (default :func:`directory`)."""
    folder = where if where is not None else directory()
    if folder is None:
        return fetch
    path = folder / hashlib.sha256(url.encode("utf-8")).hexdigest()[:32]

    async def read(limit: int) -> tuple[int, bytes]:
        kept = _fresh(path)
        if kept is not None:
            return kept
        until = time.monotonic() + _WAIT_S
        while True:
            with _locked(path) as mine:
                if mine:
                    kept = _fresh(path)  # another task may have just fetched
                    if kept is not None:
                        return kept
                    status, body = await fetch(limit)
                    _store(path, status, body)
                    return status, body
            if time.monotonic() >= until:
                return await fetch(limit)  # the other task's fetch hangs: fetch alone
            await asyncio.sleep(_POLL_S)
            kept = _fresh(path)
            if kept is not None:
                return kept

    return read


def _fresh(path: Path) -> tuple[int, bytes] | None:
    try:  # not blocking: a FIFO there would block the task's loop at open
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        with os.fdopen(handle, "rb", closefd=False) as file:
            data = file.read(_MOST)
    except OSError:
        return None
    finally:
        os.close(handle)
    if len(data) < _HEAD.size:
        return None
    at, status = _HEAD.unpack_from(data)
    if not 0 <= time.time() - at < FRESH_S:
        return None
    return status, data[_HEAD.size :]


def _store(path: Path, status: int, body: bytes) -> None:
    """The reading, written under a temporary name and renamed: a reader never sees half."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        temporary.write_bytes(_HEAD.pack(time.time(), status) + body)
        os.replace(temporary, path)
    except OSError as exc:
        logger.debug("Cannot keep the /metrics reading in %s: %s", path.parent, exc)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """The fetch lock of ``path``'s endpoint, taken without waiting: yields whether it is
    ours."""
    lock = path.with_name(f"{path.name}.lock")
    try:
        handle = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError:
        yield True  # no lock file: fetch
        return
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(handle)
