"""One ``/metrics`` reading per machine, not per task (option ``maxServerQueue``).

:class:`~dspark_json.http.gauges.Gauges` fetches an endpoint's ``/metrics`` at most once a
second per worker process; each Spark task running at once is a process of its own, so a
machine with 32 task slots would read each replica 32 times a second, and a cluster of 200
cores 200 times (vLLM renders ``/metrics`` in its API server process). :func:`shared` wraps a
task's fetch so that the tasks of one machine share one: the last answer is kept in a small
file in a machine-local directory (:func:`directory`: the system's temp directory, one per
user, mode 0700), named by the sha256 of the endpoint's URL and of the headers that may route
its requests (option ``requestHeaders``, credentials by name only: two queries whose headers
send them to different backends of one gateway read and share apart), and a task
whose reading is older than :data:`FRESH_S` takes the file's ``flock`` and fetches, while the
others use the file. So each endpoint's ``/metrics`` is read at most about once per
:data:`FRESH_S` per machine, whatever the number of tasks. Where the directory cannot be used
(read-only, another user's), each task fetches on its own, as before.

The room a reading shows is shared by the tasks that send to the endpoint at once: each task
keeps a lease in the same directory (an empty file per endpoint and task, its modification time
refreshed at each reading, about once a second), and :func:`tasks` counts the leases of an
endpoint not older than :data:`LEASE_S` (a task gone stops counting within it) and gives the task
its place among them, so that the gate (:class:`~dspark_json.http.gauges.Gate`) splits the room
by the count instead of each task taking all of it. Only the entries' ``lstat`` is looked at
(never their content, never through a symbolic link), at most :data:`MAX_ENTRIES` of them.

The gauges are the server's load, not a secret; the body is bounded as the fetch bounds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import stat
import struct
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dspark_json.regular import open_local

__all__ = [
    "FRESH_S",
    "LEASE_S",
    "MACHINE",
    "MAX_ENTRIES",
    "Share",
    "directory",
    "release",
    "shared",
    "tasks",
]

logger = logging.getLogger("dspark_json")

#: A machine's reading younger than this is used as is (seconds, wall clock).
FRESH_S = 0.9
#: How long a task waits for another task's fetch before it fetches on its own.
_WAIT_S = 2.5
_POLL_S = 0.05
#: Bytes of a reading read back at most (the fetch bounds the body well under this).
_MOST = 64 << 20
#: A task's lease not refreshed for this long (seconds, wall clock) is a task gone.
LEASE_S = 3.0
#: A lease older than this is removed by the next task that counts (its task was killed).
_FORGET_LEASE_S = 60.0
#: The most directory entries looked at when counting the leases (a directory filled by
#: accident or malice costs a bounded scan, once a reading).
MAX_ENTRIES = 4096
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


def shared(url: str, fetch: Fetch, where: Path | None = None, *, route: str = "") -> Fetch:
    """``fetch`` of ``url``'s ``/metrics``, shared by the tasks of this machine that send with
    the same ``route`` (the digest of option requestHeaders:
    :meth:`~dspark_json.http.headers.RequestHeaders.route`) through a file in ``where``
    (default :func:`directory`)."""
    folder = where if where is not None else directory()
    if folder is None:
        return fetch
    path = folder / _name(url, route)

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
    try:  # not blocking (a FIFO there would block the task's loop), no link followed
        with open_local(str(path), follow=False) as file:
            data = file.read(_MOST)
    except OSError:  # NotRegular too
        return None
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


def _name(url: str, route: str = "") -> str:
    """The file name of ``url``'s reading for requests sent with ``route`` (a digest of their
    headers): a digest itself, no credentials in it."""
    key = f"{url}\n{route}" if route else url
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class Share:
    """The tasks of this machine that send to an endpoint now (``count``, at least 1: the task
    that asks) and the asking task's place among them (``rank``, 0 to ``count - 1``, by the
    leases' names: the same order in every task)."""

    count: int
    rank: int


#: The machine's offset among the ranks of several machines (the room's remainder goes to
#: different places on different machines, not to rank 0 on each).
MACHINE = int(hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8], 16)


def tasks(url: str, task: str, where: Path | None = None, *, route: str = "") -> Share:
    """Refresh the lease of ``task`` (a name unique on the machine: process and gate) on
    ``url``'s room (for requests sent with ``route``) and count the live leases of it in
    ``where`` (default :func:`directory`); ``Share(1, 0)`` where the directory cannot be
    used."""
    folder = where if where is not None else directory()
    if folder is None:
        return Share(1, 0)
    prefix = f"{_name(url, route)}.task."
    mine = prefix + task
    _touch(folder / mine)
    now = time.time()
    live = {mine}
    try:
        with os.scandir(folder) as entries:
            for seen, entry in enumerate(entries):
                if seen >= MAX_ENTRIES:
                    break
                if not entry.name.startswith(prefix) or entry.name == mine:
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(info.st_mode):
                    continue
                age = now - info.st_mtime
                if age < LEASE_S:
                    live.add(entry.name)
                elif age > _FORGET_LEASE_S:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
    except OSError:
        return Share(1, 0)
    return Share(len(live), sorted(live).index(mine))


def release(url: str, task: str, where: Path | None = None, *, route: str = "") -> None:
    """``task`` sends no more to ``url`` (with ``route``): its lease goes (the others count it
    no longer)."""
    folder = where if where is not None else directory()
    if folder is not None:
        with contextlib.suppress(OSError):
            os.unlink(folder / f"{_name(url, route)}.task.{task}")


def _touch(path: Path) -> None:
    """The lease's time set to now (made where missing; never through a link, never a FIFO)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        handle = os.open(path, flags, 0o600)
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(handle).st_mode):
            os.utime(handle)
    except OSError:
        pass
    finally:
        os.close(handle)
