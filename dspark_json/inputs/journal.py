"""The journal: the raw answers of each partition, kept until the sink has committed them.

A model does not answer the same prompt twice the same way, and every call costs. Spark replays a
micro-batch after a crash by reading the same offsets again, and retries a failed task by reading
its partition again; both would call the model again. With option ``journal`` (a directory), each
partition's raw response bodies and per-row errors are written there, atomically, before the
partition's rows are handed to Spark; a replay or a retry of the same rows reads them back
instead of sending anything.

With option ``repairAttempts``, each round of re-asks is kept next to its entry
(``<entry>.repair-<n>``: the rows asked and their answers), written before the next round and
before the rows leave, pruned with the entry; a replay re-asks the same rows (the same first
answers are wrong the same way) and reads each round back instead of sending it.

An entry is named by the rows it covers (prompt file names and row ranges), so the same rows find
the same entry whatever the batch or task. ``commit(end)`` of the stream reader prunes entries that
end at or before ``end``; nothing depends on it being called (Spark calls it late, and never for
the last batch before a shutdown): a left-over entry is only disk, pruned at a later commit.

The journal never costs answers: its directory is checked writable at ``.load()``, and an entry
that cannot be written later (disk full, permissions changed) is logged as an error while the
rows go on to Spark (only a replay of that batch would ask the model again); an entry that cannot
be read is logged and asked again; pruning that fails is logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql.types import StructType

from dspark_json.fs import open_regular, resolve, write_atomic
from dspark_json.inputs.listing import Position, Segment
from dspark_json.records import Outcomes
from dspark_json.response.convert import arrow_schema
from dspark_json.rows import ERROR
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

__all__ = ["Journal"]

logger = logging.getLogger("dspark_json")

_SUFFIX = ".arrow"
#: The ``_error`` column's Arrow type, from its Spark type.
_ERROR = arrow_schema(StructType([ERROR.field])).field(ERROR.name).type
_SCHEMA = pa.schema([("body", pa.string()), ("error", _ERROR)])


class Journal:
    """Entries in one directory (a path or a URI pyarrow's filesystems resolve), reached with
    the query's storage settings."""

    def __init__(self, directory: str, *, storage: StorageSettings = ENVIRONMENT_ONLY) -> None:
        self.directory = directory.rstrip("/")
        self.storage = storage

    @staticmethod
    def key(segments: Sequence[Segment]) -> str:
        """The entry name for these rows: a digest of (file name, first row, end row)."""
        spans = [[s.path.rsplit("/", 1)[-1], s.start, s.end] for s in segments]
        return hashlib.sha256(json.dumps(spans).encode()).hexdigest()[:40]

    def load(self, key: str) -> Outcomes | None:
        """The recorded outcomes of an entry, or ``None`` when there is none."""
        table = self._read(key)
        return None if table is None else _outcomes(table)

    def save(self, key: str, end: Position, outcomes: Outcomes) -> bool:
        """Write an entry atomically (:func:`~dspark_json.fs.write_atomic`). Where that fails,
        log it and return false: the answers are in hand, and failing the task would lose
        them."""
        return self._write(key, end, _table(outcomes))

    def load_round(self, key: str, round: int) -> tuple[list[int], Outcomes] | None:
        """The answers of re-ask round ``round`` of an entry: the rows asked and their
        outcomes, or ``None`` when that round was not journaled."""
        table = self._read(f"{key}.repair-{round}")
        if table is None:
            return None
        return table.column("row").to_pylist(), _outcomes(table)

    def save_round(
        self, key: str, round: int, end: Position, rows: Sequence[int], outcomes: Outcomes
    ) -> bool:
        """Write the answers of re-ask round ``round`` (to ``rows``) next to the entry, as
        :meth:`save` does; pruned with it."""
        table = _table(outcomes).add_column(0, "row", pa.array(rows, pa.int32()))
        return self._write(f"{key}.repair-{round}", end, table)

    def _read(self, name: str) -> pa.Table | None:
        fs, root = resolve(self.directory, self.storage)
        path = f"{root}/{name}{_SUFFIX}"
        try:
            # a FIFO named like an entry would block the task for good: refused, never read
            with open_regular(fs, path) as source:
                table = pa.ipc.open_file(source).read_all()
            table.column("body")
            table.column("error")
        except FileNotFoundError:
            return None
        except (OSError, KeyError, pa.ArrowInvalid) as exc:
            logger.error(
                "journal %s: entry %s cannot be read (%s); its prompts are sent again.",
                self.directory,
                name,
                exc,
            )
            return None
        return table

    def _write(self, name: str, end: Position, table: pa.Table) -> bool:
        table = table.replace_schema_metadata({"end": json.dumps(end.to_offset())})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as out:
            out.write_table(table)
        try:
            write_atomic(
                self.directory,
                f"{name}{_SUFFIX}",
                sink.getvalue().to_pybytes(),
                storage=self.storage,
            )
        except (OSError, pa.ArrowException) as exc:  # a store may lack what a write needs
            logger.error(
                "journal %s: the answers of entry %s could not be written (%s). The rows go on "
                "to Spark; a replay of this micro-batch would ask the model again. Check the "
                "option 'journal' directory.",
                self.directory,
                name,
                exc,
            )
            return False
        return True

    def prune(self, committed: Position) -> int:
        """Delete the entries whose rows all lie at or before ``committed``; how many went."""
        fs, root = resolve(self.directory, self.storage)
        try:
            infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        except OSError as exc:
            logger.warning("journal %s: cannot list it to prune (%s).", self.directory, exc)
            return 0
        removed = 0
        for info in infos:
            if info.type != pafs.FileType.File or not info.base_name.endswith(_SUFFIX):
                continue
            try:
                with fs.open_input_file(info.path) as source:
                    metadata: dict[bytes, bytes] = pa.ipc.open_file(source).schema.metadata or {}
                end = Position.from_offset(json.loads(metadata[b"end"]))
            except (OSError, KeyError, ValueError, pa.ArrowInvalid):
                continue  # not ours, or being written
            if end <= committed:
                try:
                    fs.delete_file(info.path)
                except OSError as exc:
                    logger.warning("journal %s: cannot prune %s (%s).", self.directory, info, exc)
                    continue
                removed += 1
        if removed:
            logger.info("journal %s: pruned %d committed entries", self.directory, removed)
        return removed


def _table(outcomes: Outcomes) -> pa.Table:
    return pa.table(
        {
            "body": outcomes.bodies.cast(pa.string()),
            "error": pa.array([outcomes.errors.get(i) for i in range(len(outcomes))], _ERROR),
        },
        schema=_SCHEMA,
    )


def _outcomes(table: pa.Table) -> Outcomes:
    bodies = table.column("body").combine_chunks().cast(pa.large_string())
    errors = table.column("error").to_pylist()
    return Outcomes(bodies, {i: e for i, e in enumerate(errors) if e is not None})
