"""Claims on the response cache's entries: a request another task is already sending waits for
its answer instead of being sent again (option ``cache``, local and mounted filesystems only).

A task about to send a cacheable request first creates ``<key>.claim`` next to the entry it will
write (:meth:`~dspark_json.http.cache.ResponseCache.where`), only if absent (``O_CREAT |
O_EXCL``, atomic on a local filesystem and on NFS v3+). Another task that finds the claim waits
for the entry instead of sending the same request. A claim names its owner, whose lease
(``<cache>/_claims/<owner>.lease``: its expiry, renewed every :data:`LEASE_RENEW_SECONDS` by a
thread while the owner sends) says it lives::

    <cache>/<2 hex digits>/<64 hex digits>.claim     {"owner": "<host>-<pid>-<random>"}
    <cache>/_claims/<host>-<pid>-<random>.lease      {"expires": <unix time>}

A claim is released (deleted) once its answer is written, or once its request failed: the
waiting tasks then claim it in turn and send it themselves, so each row gets its own answer or
its own error, never another task's error. A waiting task stops waiting when the owner's lease
has expired (a task killed or hung stops renewing it: within :data:`LEASE_SECONDS`), at once
when the owner is a process of this host that is gone, and in any case at ``requestDeadline``
after it started; then it sends the request itself. A lease is believed for
:data:`LEASE_SECONDS` at most (an expiry further ahead, or a claim written in the future, past
:data:`CLOCK_SKEW_SECONDS`, is forged or broken: stale). Claim and lease files hold no credential
(a host name, a process id, a random id, a time); they are never read as entries (their names
end in ``.claim`` and ``.lease``, never ``.answer``).

Everything in the cache may be written by others (a shared mount): a claim or lease is read
only where it is a regular file (:func:`~dspark_json.fs.read_regular`; a FIFO there
would block the task), a claim that is not one is removed (WARN), and a ``_claims`` that is a
symbolic link is refused (WARN, claims off): the sweep would delete files where it points. The
sweep and the take-over delete through a descriptor of ``_claims`` opened without following a
link (``O_NOFOLLOW``, ``dir_fd``), regular files only.

pyarrow's object-store filesystems have no create-if-absent: there claims are off (one INFO
per process says so) and each task sends what it does not find in the cache, as without claims.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import stat
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from dspark_json.fs import NotRegular, mask_uris, read_regular, resolve
from dspark_json.http.cache import ResponseCache

__all__ = [
    "CLAIM_SUFFIX",
    "CLOCK_SKEW_SECONDS",
    "LEASE_FOLDER",
    "LEASE_RENEW_SECONDS",
    "LEASE_SECONDS",
    "LEASE_SUFFIX",
    "Claims",
    "Waited",
]

logger = logging.getLogger("dspark_json")

#: What a claim's name ends with (next to the entry it is for).
CLAIM_SUFFIX = ".claim"
#: What a lease's name ends with (in ``<cache>/_claims/``).
LEASE_SUFFIX = ".lease"
#: The folder of the leases, in the cache directory (not two hex digits: never an entry's).
LEASE_FOLDER = "_claims"
#: Seconds a lease holds its owner's claims without being renewed.
LEASE_SECONDS = 30.0
#: Seconds between an owner's renewals of its lease.
LEASE_RENEW_SECONDS = 5.0
#: Seconds two hosts' clocks may differ: a lease expiring later than :data:`LEASE_SECONDS`
#: and this from now, or a claim written further than this in the future, is not believed.
CLOCK_SKEW_SECONDS = 5.0
#: Claims and leases are local files (the filesystem the cache's directory is on, by path).
_LOCAL = pafs.LocalFileSystem()
#: The longest a claim or lease file is read (they hold a few dozen bytes).
_READ_BYTES = 512
#: The first and the longest pause between two looks at the entries waited for.
_FIRST_PAUSE, _LONGEST_PAUSE = 0.05, 1.0
#: Cache directories whose claims are off, already said (once per process).
_SAID_OFF: set[str] = set()
_SAID_LOCK = threading.Lock()


@dataclass
class Waited:
    """What :meth:`Claims.wait` found: the answers another task wrote (by key), the keys to
    claim again (their owner released them without an answer, or died) and the keys still
    claimed by a live task at the deadline (send them without a claim)."""

    answers: dict[str, str] = field(default_factory=dict)
    freed: list[str] = field(default_factory=list)
    late: list[str] = field(default_factory=list)


class Claims:
    """One task's claims on the requests it is about to send (see the module doc).

    ``available`` is false on filesystems without an atomic create-if-absent (object stores),
    or where the lease cannot be written: then :meth:`claim` claims everything and nobody
    waits.
    """

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache
        fs, root = resolve(cache.directory, cache.storage)
        self.available = fs.type_name == "local"
        self._root = root.rstrip("/")
        self.owner = f"{_host()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._lease = self._lease_path(self.owner)
        self._held: set[str] = set()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        if not self.available:
            _say_off(cache, f"its filesystem ({fs.type_name}) has no create-if-absent")

    @contextlib.contextmanager
    def leased(self) -> Iterator[Claims]:
        """This task's lease written and renewed for the duration; every claim still held
        released and the lease removed at the end (an error included)."""
        if not self.available:
            yield self
            return
        folder = os.path.dirname(self._lease)
        if os.path.islink(folder):
            _say_off(
                self.cache,
                f"{folder} is a symbolic link (to {os.path.realpath(folder)}): leases are "
                "written and swept only in a directory of the cache itself. Remove the link",
                warn=True,
            )
            self.available = False
            yield self
            return
        try:
            self._renew()
        except OSError as exc:
            _say_off(self.cache, f"its lease cannot be written ({exc})")
            self.available = False
            yield self
            return
        self._sweep()
        self._renewer = threading.Thread(
            target=self._keep_renewing, name="dspark-json-lease", daemon=True
        )
        self._renewer.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._renewer.join()
            self.release(list(self._held))
            with contextlib.suppress(OSError):
                os.unlink(self._lease)

    def claim(self, key: str) -> bool:
        """Claim ``key``'s request: true where this task is to send it (claimed now, a dead
        task's claim taken over, or claims not available), false where a live task holds it
        (wait for its entry)."""
        if not self.available or key in self._held:
            return True  # held already: rows of this task that send the same body (dedupe=off)
        path = self._claim_path(key)
        for _ in range(3):
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = self._claimant(path)
                if owner is not None and self._alive(owner, {}):
                    return False  # a live task's: wait for its entry
                if owner is None and self._young(path):
                    return False  # a claim being written this instant
                self._take_over(path, owner)
                continue
            except FileNotFoundError:
                with contextlib.suppress(OSError):
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                continue
            except OSError as exc:
                logger.warning(
                    "cache %s: a claim could not be written (%s); the request is sent.",
                    self.cache,
                    mask_uris(str(exc)),
                )
                return True
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                out.write(json.dumps({"owner": self.owner}))
            self._held.add(key)
            return True
        return True  # claims that keep changing hands: sent rather than waited for

    def release(self, keys: Sequence[str]) -> None:
        """Remove this task's claims on ``keys`` (their answers written, or failed); a claim
        another task has taken over since (this one's lease had expired) is left to it."""
        for key in keys:
            if key not in self._held:
                continue
            self._held.discard(key)
            path = self._claim_path(key)
            if self._claimant(path) == self.owner:
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def wait(self, keys: Sequence[str], deadline: float) -> Waited:
        """Look for the entries of ``keys`` (claimed by other tasks) until each is answered or
        freed, or until ``deadline`` (``time.monotonic()``), backing off from 50 ms to 1 s
        between looks."""
        waited = Waited()
        waiting = set(keys)
        pause = _FIRST_PAUSE
        while waiting:
            alive: dict[str, bool] = {}  # each owner's lease read once per look
            for key in sorted(waiting):
                entry = self._entry_path(key)
                # An entry refused at the lookup (corrupt) is there until the owner replaces
                # it: only its claim says when.
                if key not in self.cache.refused and os.path.exists(entry):
                    self._take_entry(key, waited)
                    waiting.discard(key)
                    continue
                owner = self._claimant(self._claim_path(key))
                if owner is not None and self._alive(owner, alive):
                    continue
                if owner is None and self._young(self._claim_path(key)):
                    continue  # a claim being written this instant
                if os.path.exists(entry):  # written, then released, between the two looks
                    self._take_entry(key, waited)
                else:
                    waited.freed.append(key)
                waiting.discard(key)
            if not waiting:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                waited.late.extend(sorted(waiting))
                break
            time.sleep(min(pause, left))
            pause = min(pause * 2, _LONGEST_PAUSE)
        return waited

    def _take_entry(self, key: str, waited: Waited) -> None:
        """The entry of ``key`` into ``waited.answers``; one the cache refuses (WARN) is
        freed: this task claims and sends it."""
        body = self.cache.get_key(key)
        if body is None:
            waited.freed.append(key)
        else:
            waited.answers[key] = body

    def _claim_path(self, key: str) -> str:
        folder, name = self.cache.where(key, CLAIM_SUFFIX)
        return f"{self._root}{folder[len(self.cache.directory) :]}/{name}"

    def _entry_path(self, key: str) -> str:
        folder, name = self.cache.where(key)
        return f"{self._root}{folder[len(self.cache.directory) :]}/{name}"

    def _lease_path(self, owner: str) -> str:
        return f"{self._root}/{LEASE_FOLDER}/{owner}{LEASE_SUFFIX}"

    def _claimant(self, path: str) -> str | None:
        """The owner a claim names; ``None`` where it is gone, empty or unreadable."""
        try:
            owner = json.loads(read_regular(_LOCAL, path, _READ_BYTES))["owner"]
        except NotRegular as exc:  # a FIFO there would block whoever reads it: removed
            logger.warning(
                "cache %s: claim %s is %s; removed, and the request is claimed again.",
                self.cache,
                mask_uris(path),
                exc.reason,
            )
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return None
        if not isinstance(owner, str) or not re.fullmatch(r"[A-Za-z0-9._]+-\d+-[0-9a-f]+", owner):
            return None
        return owner

    def _young(self, path: str) -> bool:
        """Whether the file at ``path`` is there and was written less than a lease ago (and not
        in the future, past the clocks' skew: such a time is not believed)."""
        try:
            age = time.time() - os.stat(path).st_mtime
        except OSError:
            return False
        return -CLOCK_SKEW_SECONDS <= age < LEASE_SECONDS

    def _alive(self, owner: str, known: dict[str, bool]) -> bool:
        """Whether ``owner``'s lease is there and unexpired, and (a process of this host) its
        process lives; ``known`` keeps the answers of one look."""
        if owner in known:
            return known[owner]
        if owner == self.owner:
            known[owner] = True
            return True
        try:
            expires = float(
                json.loads(read_regular(_LOCAL, self._lease_path(owner), _READ_BYTES))["expires"]
            )
        except (OSError, ValueError, KeyError, TypeError, RecursionError, OverflowError):
            expires = 0.0
        now = time.time()
        # A lease says at most LEASE_SECONDS ahead when renewed: more is forged or broken.
        plausible = now < expires <= now + LEASE_SECONDS + CLOCK_SKEW_SECONDS
        alive = plausible and not _gone_here(owner)
        known[owner] = alive
        return alive

    def _take_over(self, path: str, owner: str | None) -> None:
        """Remove a dead task's claim (still naming ``owner``; ``None``: an unreadable claim
        older than a lease) and, where it is there, the dead task's lease."""
        if self._claimant(path) == owner:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if owner is not None:
            _unlink_in(os.path.dirname(self._lease), f"{owner}{LEASE_SUFFIX}")
        logger.info(
            "cache %s: the claim of a task that is gone (%s) taken over.",
            self.cache,
            owner or "unreadable",
        )

    def _renew(self) -> None:
        folder = os.path.dirname(self._lease)
        os.makedirs(folder, exist_ok=True)
        temporary = f"{folder}/.{self.owner}.{uuid.uuid4().hex}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as out:
                json.dump({"expires": time.time() + LEASE_SECONDS}, out)
            os.replace(temporary, self._lease)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def _keep_renewing(self) -> None:
        while not self._stop.wait(LEASE_RENEW_SECONDS):
            try:
                self._renew()
            except OSError as exc:
                logger.warning(
                    "cache %s: the lease could not be renewed (%s); other tasks may send "
                    "this task's requests too.",
                    self.cache,
                    mask_uris(str(exc)),
                )

    def _sweep(self) -> None:
        """Remove the leases (and their temporary files) of tasks gone for more than a lease:
        what a task killed before its end left behind. Only regular files in ``_claims``
        itself: read and deleted through a descriptor of it opened without following a link."""
        folder = os.path.dirname(self._lease)
        try:
            descriptor = os.open(folder, _DIRECTORY_FLAGS)
        except OSError:
            return
        try:
            now = time.time()
            for name in os.listdir(descriptor):
                try:
                    info = os.stat(name, dir_fd=descriptor, follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(info.st_mode):
                    continue
                young = -CLOCK_SKEW_SECONDS <= now - info.st_mtime < LEASE_SECONDS
                if name.endswith(LEASE_SUFFIX) and not name.startswith("."):
                    owner = name[: -len(LEASE_SUFFIX)]
                    if owner == self.owner or young or self._alive(owner, {}):
                        continue
                elif not name.startswith(".") or young:
                    continue
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=descriptor)
        finally:
            os.close(descriptor)


#: A directory opened to read and delete in it, never through a symbolic link.
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _unlink_in(folder: str, name: str) -> None:
    """Delete the regular file ``name`` in ``folder``, never through a symbolic link (neither
    ``folder`` nor ``name``); nothing where it cannot be."""
    try:
        descriptor = os.open(folder, _DIRECTORY_FLAGS)
    except OSError:
        return
    try:
        if stat.S_ISREG(os.stat(name, dir_fd=descriptor, follow_symlinks=False).st_mode):
            os.unlink(name, dir_fd=descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _gone_here(owner: str) -> bool:
    """Whether ``owner`` names a process of this host that no longer runs."""
    host, pid = owner.rsplit("-", 2)[:2]
    if host != _host():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError, OverflowError):
        return False  # another user's process (EPERM): it lives
    try:  # killed but not yet reaped by its parent (a zombie, on Linux): gone as well
        with open(f"/proc/{int(pid)}/stat", "rb") as stat:
            return stat.read(4096).rpartition(b")")[2].split()[:1] == [b"Z"]
    except OSError:
        return False


def _host() -> str:
    """This host's name as an owner names it (no ``-``: the owner's fields are split on it)."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:100] or "host"


def _say_off(cache: ResponseCache, why: str, *, warn: bool = False) -> None:
    """One INFO (``warn``: WARN) per process and cache directory: claims are off, and why."""
    with _SAID_LOCK:
        if cache.directory in _SAID_OFF:
            return
        _SAID_OFF.add(cache.directory)
    logger.log(
        logging.WARNING if warn else logging.INFO,
        "cache %s: no claims between tasks, %s; tasks running at once may send the same "
        "request (each answer is still kept once).",
        cache,
        mask_uris(why),
    )
