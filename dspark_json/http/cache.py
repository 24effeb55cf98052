"""The response cache (option ``cache``): answers kept across runs and queries, by request.

An entry is named by ``sha256(model, request body)``: the model the driver settled at
``.load()`` (the one the server serves under that name) and the exact bytes sent. It holds the
raw body of one HTTP 200 answer that is a chat completion envelope (:func:`is_completion`),
behind a header line that states its length, digest and model::

    <cache>/<first 2 hex digits>/<64 hex digits>.answer
        dspark-json-cache 1 {"status": 200, "bytes": 1234, "sha256": "...", "model": "m"}\\n<body>

Entries are written atomically (a hidden name, then a rename:
:func:`dspark_json.fs.write_atomic`; an object store copies the finished object) before the
partition's rows leave. Reads apply the network's limits: an entry that is not a regular file
(never opened: a FIFO would block), is larger than ``maxResponseBytes``, has a header nested
past :data:`~dspark_json.rows.MAX_NESTING`, is not UTF-8, was kept for another model, cannot be
read, is cut short or does not match its digest is logged (WARN, naming the entry) and its
request is sent again (the new answer replaces it); one that cannot be
written is logged and the rows go on. The cache only saves requests: the journal stays what
makes a replay exactly once. Tasks running at once that miss the same entry send its request
once: the claims next to the entries (:mod:`.claims`, files that never end in ``.answer``).

Nothing expires an entry by itself; delete by age (``find DIR -name '*.answer' -mtime +7
-delete``, or an object store's lifecycle rule on the prefix).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from dspark_json.fs import NotRegular, TooLarge, mask_uris, read_regular, resolve, write_atomic
from dspark_json.http.options import HttpOptions
from dspark_json.http.secrets import redact
from dspark_json.rows import load_json
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

__all__ = ["ENTRY_SUFFIX", "ResponseCache", "is_completion"]

logger = logging.getLogger("dspark_json")

#: What every entry's name ends with.
ENTRY_SUFFIX = ".answer"
_MAGIC = b"dspark-json-cache 1 "
#: Room for the header line over the body's limit (magic, length, digest, model name).
_HEADER_ROOM = 64 * 1024
#: maxResponseBytes' default (the option's own declaration: one definition).
DEFAULT_MAX_BYTES: int = HttpOptions.max_response_bytes
#: Lookups and writes at once: object stores answer in tens of milliseconds each.
_THREADS = 16


class ResponseCache:
    """The entries of one directory (a path or a URI pyarrow's filesystems resolve) for one
    model, reached with the query's storage settings."""

    def __init__(
        self,
        directory: str,
        model: str | None,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        storage: StorageSettings = ENVIRONMENT_ONLY,
    ) -> None:
        self.directory = directory.rstrip("/")
        self.storage = storage
        self.model = model or ""
        #: The largest body an entry may hold (option ``maxResponseBytes``).
        self.max_bytes = max_bytes
        #: The keys whose entries were refused (WARN) so far: not read again.
        self.refused: set[str] = set()

    def key(self, request: bytes) -> str:
        """The entry name of ``request``: hex sha256 of the model and the body."""
        digest = hashlib.sha256(b"dspark-json-cache/1\0")
        digest.update(self.model.encode("utf-8"))
        digest.update(b"\0")
        digest.update(request)
        return digest.hexdigest()

    def where(self, key: str, suffix: str = ENTRY_SUFFIX) -> tuple[str, str]:
        """(directory, file name) of an entry, or of the file next to it whose name ends in
        ``suffix`` (a claim: :mod:`.claims`)."""
        return f"{self.directory}/{key[:2]}", f"{key}{suffix}"

    def get(self, request: bytes) -> str | None:
        """The cached answer body to ``request``, or ``None`` (not cached, or not usable: a
        WARN naming the entry, and the request is sent again)."""
        return self.get_key(self.key(request))

    def get_key(self, key: str) -> str | None:
        """:meth:`get` of the entry named ``key``."""
        folder, name = self.where(key)
        fs, root = resolve(folder, self.storage)
        path = f"{root}/{name}"
        try:
            # The type first: a FIFO or a device where an entry should be is never read
            # (reading a FIFO blocks for as long as nobody writes to it): fs.read_regular.
            data = read_regular(fs, path, self._largest)
        except FileNotFoundError:
            return None
        except NotRegular as exc:
            return self._unusable(folder, name, exc.reason)
        except TooLarge as exc:
            size = f"over {self._largest} bytes" if exc.size is None else f"{exc.size} bytes"
            return self._unusable(folder, name, f"{size}, over maxResponseBytes={self.max_bytes}")
        except OSError as exc:
            if any(s in str(exc).lower() for s in ("not found", "no such file", "does not exist")):
                return None
            return self._unusable(folder, name, f"cannot be read: {exc}")
        body, problem = _body(data, self.model)
        if problem is not None:
            return self._unusable(folder, name, f"{problem} ({len(data)} bytes)")
        return body

    @property
    def _largest(self) -> int:
        """The most bytes an entry may hold: its body's limit and a header line."""
        return self.max_bytes + _HEADER_ROOM

    def _unusable(self, folder: str, name: str, why: str) -> str | None:
        """``None`` (what :meth:`get` returns), after a WARN naming the entry (credentials
        masked) and what is wrong with it."""
        self.refused.add(name.removesuffix(ENTRY_SUFFIX))
        logger.warning(
            "cache %s: entry %s is not used: %s; asked again.",
            self,
            mask_uris(f"{folder}/{name}"),
            mask_uris(why),
        )
        return None

    def put(self, request: bytes, body: str) -> bool:
        """Keep ``body`` (an HTTP 200 answer) for ``request``; false (logged) where it cannot
        be written: the answer is in hand, and failing the task would lose it. A body that is
        not a chat completion (:func:`is_completion`) is never kept: false, nothing written."""
        if not is_completion(body):
            return False
        raw = body.encode("utf-8")
        header = {
            "status": 200,
            "bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
            "model": self.model,
        }
        folder, name = self.where(self.key(request))
        try:
            write_atomic(
                folder,
                name,
                _MAGIC + json.dumps(header).encode() + b"\n" + raw,
                storage=self.storage,
            )
        except (OSError, pa.ArrowException) as exc:  # a store may lack what a write needs
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


def _body(data: bytes, model: str) -> tuple[str | None, str | None]:
    """(an entry's body, ``None``), or (``None``, what is wrong) where the entry is not whole
    and intact, or was kept for another model than ``model``."""
    if not data.startswith(_MAGIC):
        return None, "corrupt or cut short: not an entry"
    head, sep, raw = data[len(_MAGIC) :].partition(b"\n")
    if not sep:
        return None, "corrupt or cut short: no header line"
    try:
        header = load_json(head)
        if not isinstance(header, dict) or header.get("status") != 200:
            return None, "corrupt or cut short: not a header"
        if (
            header.get("bytes") != len(raw)
            or header.get("sha256") != hashlib.sha256(raw).hexdigest()
        ):
            return None, "corrupt or cut short: the body does not match its length and digest"
        kept_for = header.get("model", model)  # entries of version 1 before it was recorded
        if kept_for != model:
            return None, f"kept for model {kept_for!r}, not {model!r}"
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "corrupt: not UTF-8"
    except (ValueError, TypeError, RecursionError) as exc:
        return None, f"corrupt or cut short: header line unreadable ({exc})"
