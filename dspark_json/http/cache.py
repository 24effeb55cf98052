"""The response cache (option ``cache``): answers kept across runs and queries, by request.

An entry is named by ``sha256(model, request body)``: the model the driver settled at
``.load()`` (the one the server serves under that name) and the exact bytes sent. It holds the
raw body of one HTTP 200 answer, behind a header line that states its length and digest::

    <cache>/<first 2 hex digits>/<64 hex digits>.answer
        dspark-json-cache 1 {"status": 200, "bytes": 1234, "sha256": "..."}\\n<body bytes>

Entries are written atomically (a hidden name, then a rename:
:func:`dspark_json.fs.write_atomic`; an object store copies the finished object) before the
partition's rows leave. An entry that cannot be read, is cut short or does not match its digest
is logged (WARN) and its request is sent again (the new answer replaces it); one that cannot be
written is logged and the rows go on. The cache only saves requests: the journal stays what
makes a replay exactly once.

Nothing expires an entry by itself; delete by age (``find DIR -name '*.answer' -mtime +7
-delete``, or an object store's lifecycle rule on the prefix).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from dspark_json.fs import resolve, write_atomic
from dspark_json.http.secrets import redact
from dspark_json.rows import load_json

__all__ = ["ENTRY_SUFFIX", "ResponseCache", "is_completion"]

logger = logging.getLogger("dspark_json")

#: What every entry's name ends with.
ENTRY_SUFFIX = ".answer"
_MAGIC = b"dspark-json-cache 1 "
#: Lookups and writes at once: object stores answer in tens of milliseconds each.
_THREADS = 16


class ResponseCache:
    """The entries of one directory (a path or a URI pyarrow's filesystems resolve) for one
    model."""

    def __init__(self, directory: str, model: str | None) -> None:
        self.directory = directory.rstrip("/")
        self.model = model or ""

    def key(self, request: bytes) -> str:
        """The entry name of ``request``: hex sha256 of the model and the body."""
        digest = hashlib.sha256(b"dspark-json-cache/1\0")
        digest.update(self.model.encode("utf-8"))
        digest.update(b"\0")
        digest.update(request)
        return digest.hexdigest()

    def _where(self, key: str) -> tuple[str, str]:
        """(directory, file name) of an entry."""
        return f"{self.directory}/{key[:2]}", f"{key}{ENTRY_SUFFIX}"

    def get(self, request: bytes) -> str | None:
        """The cached answer body to ``request``, or ``None`` (not cached, or not usable)."""
        key = self.key(request)
        folder, name = self._where(key)
        fs, root = resolve(folder)
        try:
            with fs.open_input_stream(f"{root}/{name}") as source:
                data: bytes = source.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            if any(s in str(exc).lower() for s in ("not found", "no such file", "does not exist")):
                return None
            logger.warning("cache %s: entry %s cannot be read (%s); asked again.", self, key, exc)
            return None
        body = _body(data)
        if body is None:
            logger.warning(
                "cache %s: entry %s is corrupt or cut short (%d bytes); asked again.",
                self,
                key,
                len(data),
            )
        return body

    def put(self, request: bytes, body: str) -> bool:
        """Keep ``body`` (an HTTP 200 answer) for ``request``; false (logged) where it cannot
        be written: the answer is in hand, and failing the task would lose it. A body that is
        not a chat completion (:func:`is_completion`) is never kept: false, nothing written."""
        if not is_completion(body):
            return False
        raw = body.encode("utf-8")
        header = {"status": 200, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
        folder, name = self._where(self.key(request))
        try:
            write_atomic(folder, name, _MAGIC + json.dumps(header).encode() + b"\n" + raw)
        except OSError as exc:
            logger.warning(
                "cache %s: an answer could not be written (%s); the rows go on, a later run "
                "asks again. Check option 'cache'.",
                self,
                exc,
            )
            return False
        return True

    def get_many(self, requests: Sequence[bytes]) -> list[str | None]:
        """:meth:`get` of each request, several at once."""
        if len(requests) <= 1:
            return [self.get(r) for r in requests]
        with ThreadPoolExecutor(min(_THREADS, len(requests))) as pool:
            return list(pool.map(self.get, requests))

    def put_many(self, entries: Sequence[tuple[bytes, str]]) -> int:
        """:meth:`put` of each (request, body), several at once; how many were written."""
        if len(entries) <= 1:
            return sum(self.put(r, b) for r, b in entries)
        with ThreadPoolExecutor(min(_THREADS, len(entries))) as pool:
            return sum(pool.map(lambda e: self.put(*e), entries))

    def __repr__(self) -> str:
        return redact(self.directory)  # a URI may carry user:pass@


def is_completion(body: str | bytes) -> bool:
    """Whether ``body`` is what the parsers read as a chat completion envelope: a JSON object
    (the rule of ``_status`` ``corrupt_envelope``, which every other status passes). A gateway's
    HTML error page, a body cut short or one nested past :data:`~dspark_json.rows.MAX_NESTING`
    is not; such an answer is a server failure, and is never kept."""
    try:
        return isinstance(load_json(body), dict)
    except (ValueError, RecursionError):
        return False


def _body(data: bytes) -> str | None:
    """An entry's body, or ``None`` where the entry is not whole and intact."""
    if not data.startswith(_MAGIC):
        return None
    head, sep, raw = data[len(_MAGIC) :].partition(b"\n")
    if not sep:
        return None
    try:
        header = json.loads(head)
        if header["status"] != 200 or header["bytes"] != len(raw):
            return None
        if header["sha256"] != hashlib.sha256(raw).hexdigest():
            return None
        return raw.decode("utf-8")
    except (ValueError, KeyError, TypeError):
        return None
