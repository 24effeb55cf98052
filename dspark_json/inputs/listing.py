"""Input listing and offsets: input files in a directory, addressed by (file name, row).

The offset model: files are taken in name order and rows within a file in line order (blank lines
do not count; what a file holds is :mod:`dspark_json.inputs.files`). An offset ``{"file": name,
"row": n}`` means "every file whose name sorts before ``name``, and the first ``n`` rows of
``name``". Files are immutable once visible: a writer puts a file in place by renaming it from a
name starting with ``.`` or ``_``. A file that appears with a name sorting before the current
offset is never read; the reader says so in the log.

Nothing is lost in silence: the input directory must exist (on an object store, a prefix with no
object yet counts as an empty directory); a directory, or a listed file whose rows are not all
read yet, that disappears fails the query with its path; so does a file that holds fewer rows
when a task reads it than when it was listed. Files already read may be deleted.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
from pyspark.sql.datasource import InputPartition

from dspark_json.errors import DSparkJsonError, OptionError
from dspark_json.fs import FileEntry, kind_of, list_files, mask_uris, resolve
from dspark_json.inputs.files import (
    INPUT_SUFFIXES,
    RowIndex,
    file_rows,
    index_rows,
    packed_rows,
    rows_of,
)
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

__all__ = [
    "INPUT_SUFFIXES",
    "MAX_PARTITION_SIZE",
    "MIN_PARTITION_SIZE",
    "TASKS_PER_SLOT",
    "Position",
    "PromptListing",
    "PromptPartition",
    "Segment",
    "partition_size",
    "plan_partitions",
    "read_rows",
    "row_count",
    "rows_of",
    "segment_lines",
    "segment_packed",
]

logger = logging.getLogger("dspark_json")

_Rows = TypeVar("_Rows")
_INDEXES_LOCK = threading.Lock()


@dataclass(frozen=True, order=True)
class Position:
    """A point in the prompt input: all files before ``file`` plus ``row`` rows of ``file``."""

    file: str = ""
    row: int = 0

    def to_offset(self) -> dict[str, Any]:
        return {"file": self.file, "row": self.row}

    @classmethod
    def from_offset(cls, offset: dict[str, Any]) -> Position:
        return cls(str(offset["file"]), int(offset["row"]))


@dataclass(frozen=True)
class Segment:
    """Rows ``[start, end)`` of one prompt file; ``window``: where they lie in it, when the
    listing knows (:meth:`~dspark_json.inputs.files.RowIndex.window`), so that a task reads
    only those bytes."""

    path: str
    start: int
    end: int
    window: tuple[int, int | None, int] | None = field(default=None, compare=False)
    #: Its file is read as a stream from its start (compressed or re-encoded), the listing says.
    streamed: bool = field(default=False, compare=False)
    #: How its file's store is reached (the query's settings, carried to the executor).
    storage: StorageSettings = field(default=ENVIRONMENT_ONLY, kw_only=True, compare=False)

    def where(self, row: int) -> str:
        """How to point a user at the file's row ``row`` (0-based): ``<file> row <n>``."""
        return f"{self.path} row {row + 1}"


@dataclass(frozen=True)
class PromptPartition(InputPartition):
    """The prompts one Spark task sends: one or more segments, in input order; or, for the
    rows of a compressed file, ``parts`` of at most ``partitionSize`` rows that the task reads
    one after the other (the file decompressed once for all of them)."""

    index: int
    segments: tuple[Segment, ...]
    #: The micro-batch it belongs to, named by its end offset (Spark gives sources no batch id);
    #: ``None`` in a batch read.
    batch: str | None = None
    parts: tuple[PromptPartition, ...] = ()
    #: Its share of option repairTokenBudget for its micro-batch, set at planning (``None``: not
    #: planned so, the option as given).
    repair_token_budget: int | None = None
    #: Its share of option maxTokensPerMinute for its micro-batch, set at planning (``None``:
    #: the option as given).
    tokens_per_minute: int | None = None
    #: (machines, tasks at once) of the stream's last micro-batches, set at planning (``None``:
    #: unknown): the tasks of every machine split a /metrics reading's room (http.gauges).
    pool_width: tuple[int, int] | None = None
    #: Its share of what the stream's last micro-batches spent of maxTokensPerMinute's minute,
    #: (wall time, tokens), set at planning (http.tokens).
    tokens_spent: tuple[tuple[float, int], ...] = ()

    @property
    def rows(self) -> int:
        """How many prompt rows it holds."""
        return row_count(self.segments)


def read_rows(segment: Segment) -> list[tuple[bytes, str]]:
    """The rows of ``segment`` with where each is (``<file> row <n>``), executor side."""
    return [
        (line, segment.where(number))
        for number, line in enumerate(segment_lines(segment), start=segment.start)
    ]


def segment_lines(segment: Segment) -> list[bytes]:
    """The rows of ``segment``, executor side: all of them, or an error naming the file."""
    lines = _read(segment, file_rows)
    _check_count(segment, len(lines))
    return lines


def segment_packed(segment: Segment) -> tuple[np.ndarray, np.ndarray]:
    """:func:`segment_lines` packed end to end (:func:`~dspark_json.inputs.files.packed_rows`):
    the rows' bytes and offsets."""
    data, offsets = _read(segment, packed_rows)
    _check_count(segment, len(offsets) - 1)
    return data, offsets


def _read(segment: Segment, read: Callable[..., _Rows]) -> _Rows:
    try:
        return read(segment.path, segment.start, segment.end, segment.window, segment.storage)
    except FileNotFoundError as exc:
        raise DSparkJsonError(
            f"Input file {mask_uris(segment.path)} is gone: its rows "
            f"{segment.start + 1}-{segment.end} "
            "were listed for this micro-batch but cannot be read. Leave input files in place "
            "until the query has read them; put it back, or start the query again with a new "
            "checkpoint."
        ) from exc


def _check_count(segment: Segment, rows: int) -> None:
    if rows < segment.end - segment.start:
        raise DSparkJsonError(
            f"Input file {mask_uris(segment.path)} holds {segment.start + rows} rows now, but "
            f"{segment.end} or more were counted when it was listed: input files must not "
            "change once visible (write a new file under a hidden name, then rename it into "
            "place). Put the original back."
        )


#: Row indexes of files already read, by (path, size, modification time): a batch query run
#: again over the same directory (Spark plans every action anew) reads each file once.
_INDEXES: OrderedDict[tuple[str, int, int], RowIndex] = OrderedDict()
_INDEXES_KEPT = 256


def _indexed(entry: FileEntry, storage: StorageSettings) -> RowIndex:
    """:func:`~dspark_json.inputs.files.index_rows` of ``entry``, remembered while the file
    keeps its size and modification time (input files do not change once visible)."""
    if entry.modified is None:
        return index_rows(entry.path, storage=storage)
    key = (entry.path, entry.size, entry.modified)
    with _INDEXES_LOCK:
        if key in _INDEXES:
            _INDEXES.move_to_end(key)
            return _INDEXES[key]
    index = index_rows(entry.path, storage=storage)
    with _INDEXES_LOCK:
        _INDEXES[key] = index
        while len(_INDEXES) > _INDEXES_KEPT:
            _INDEXES.popitem(last=False)
    return index


def _scan(
    directory: str, after: str, storage: StorageSettings
) -> tuple[list[FileEntry], list[str], list[str], list[str]]:
    """The input files of ``directory`` named ``after`` or later, sorted; the names of those
    before it; the symbolic links skipped; and the FIFOs, sockets and devices skipped (opening
    a FIFO to read blocks until someone writes to it).

    A local directory is read with ``os.scandir``: its names cost no ``stat`` each, so only
    the files at or after ``after`` (those the stream has not read yet) are looked at; a link
    is not followed (see :class:`PromptListing`). Elsewhere pyarrow lists the prefix.
    """
    fs, root = resolve(directory, storage)
    if fs.type_name != "local":
        listed = list_files(directory, suffixes=INPUT_SUFFIXES, storage=storage)
        return (
            [e for e in listed if e.name >= after],
            [e.name for e in listed if e.name < after],
            [],
            [],
        )
    entries, before, links, odd = [], [], [], []
    prefix = directory.rstrip("/") + "/"
    with os.scandir(root) as found:
        for item in found:
            name = item.name
            if name.startswith((".", "_")) or not name.endswith(INPUT_SUFFIXES):
                continue
            if item.is_symlink():
                links.append(name)
            elif name < after:
                before.append(name)
            elif item.is_file(follow_symlinks=False):
                try:
                    info = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone between the two calls: as if listed a moment later
                entries.append(FileEntry(name, prefix + name, info.st_size, info.st_mtime_ns))
            elif not item.is_dir(follow_symlinks=False):
                odd.append(name)
    entries.sort(key=lambda e: e.name)
    return entries, before, links, odd


class PromptListing:
    """Driver-side view of the input directory; remembers each file's row count.

    ``option`` names the option the directory comes from (``prompts`` or ``responses``), for
    messages; without it, messages name both.

    What a micro-batch costs does not grow with the files already read: a streaming query's
    listing looks only at names from its offset's file on (:func:`_scan`: no ``stat``, no row
    count for the others), files are counted (indexed) only when a batch reaches them, and what
    is remembered of files the stream has moved past is dropped. A symbolic link in the
    directory is not followed: it is skipped, with a warning naming it once (a link could make
    the query send any file the driver can read, ``/etc`` included, to the model server); put
    the file itself, or a hard link, in the directory.
    """

    def __init__(
        self,
        directory: str,
        *,
        storage: StorageSettings = ENVIRONMENT_ONLY,
        option: str | None = None,
    ) -> None:
        self.directory = directory
        self.storage = storage
        self.option = f"option {option!r}" if option else "option 'prompts' / 'responses'"
        # Files counted and not yet read past -> their row count, index and size.
        self._rows: dict[str, int] = {}
        self._index: dict[str, RowIndex] = {}
        self._sizes: dict[str, int] = {}
        self._after = ""  # names before it are read: neither listed in detail nor remembered
        self._before: list[str] = []  # the names before it, as last listed
        self._seen: set[str] | None = None  # every name listed so far (to tell a late file)
        self._links: set[str] = set()  # symbolic links, FIFOs, devices already warned about
        self._pending: set[str] = set()  # the names from ``_after`` on, as last checked
        self._listed = False  # the directory has been seen

    def files(self) -> list[tuple[FileEntry, int]]:
        """Every visible input file with its row count, in name order."""
        return list(self.counted())

    def counted(self) -> Iterator[tuple[FileEntry, int]]:
        """:meth:`files`, one at a time: a file is counted only when it is reached."""
        self._move_to("")
        for entry in self._list():
            yield entry, self.rows(entry)

    def sample(self, rows: int) -> Iterator[Segment]:
        """The input from its first row on, in segments of at most ``rows`` rows that know where
        they lie; lazily: stop when the sample is large enough, and no more is counted or read
        (a schema sample does not read the input whole on the driver)."""
        for entry, count in self.counted():
            for start in range(0, count, rows):
                yield self.locate(
                    Segment(entry.path, start, min(start + rows, count), storage=self.storage)
                )

    def rows(self, entry: FileEntry) -> int:
        """The row count of a listed file (counted the first time)."""
        rows = self._rows.get(entry.name)
        if rows is None:
            try:
                index = _indexed(entry, self.storage)
            except FileNotFoundError as exc:
                raise DSparkJsonError(
                    f"Input file {mask_uris(entry.path)} disappeared while it was being "
                    "listed. Leave input files in place until the query has read them."
                ) from exc
            self._index[entry.name], self._rows[entry.name] = index, index.rows
            self._sizes[entry.name] = entry.size
            return index.rows
        if self._sizes.get(entry.name, entry.size) != entry.size:
            logger.warning(
                "Input file %s changed size after it was counted (%d -> %d bytes): input "
                "files must not change once visible. Rows added to it are not read; rows "
                "taken out of it fail the query when it is read.",
                entry.path,
                self._sizes[entry.name],
                entry.size,
            )
            self._sizes[entry.name] = entry.size
        return rows

    def refresh(self) -> None:
        """List the directory again at the next use (each use lists it again here)."""

    def _move_to(self, name: str) -> None:
        """Look at names from ``name`` on; forget the files before it (all read)."""
        if name < self._after:
            self.refresh()  # names between the two were not listed in detail
        elif name > self._after:
            for known in [k for k in self._rows if k < name]:
                del self._rows[known], self._index[known], self._sizes[known]
            self._pending = {k for k in self._pending if k >= name}
        self._after = name

    def _list(self) -> list[FileEntry]:
        """The directory's input files from ``_after`` on; an error naming the directory where
        it is missing."""
        kind = kind_of(self.directory, storage=self.storage)
        if kind == "file":
            raise OptionError(
                f"{self.option.capitalize()} names {mask_uris(self.directory)}, which is a file; "
                "give the "
                "directory that holds the input files (new files are picked up as they land)."
            )
        if kind == "missing":
            if self._listed:
                raise DSparkJsonError(
                    f"The input directory {mask_uris(self.directory)} ({self.option}) "
                    "disappeared while the query was reading it. Put it back, or start the "
                    "query again with a new checkpoint."
                )
            raise OptionError(
                f"{self.option.capitalize()} names {mask_uris(self.directory)}, which does not "
                "exist. Create "
                "the directory (a streaming query then picks up files as they land in it), or "
                "fix the path."
            )
        self._listed = True
        entries, self._before, links, odd = _scan(self.directory, self._after, self.storage)
        for name in sorted(set(odd) - self._links):
            logger.warning(
                "Input file %s/%s (%s) is not a regular file (a FIFO, a socket or a device): "
                "it is not read. Put a regular file in its place.",
                self.directory.rstrip("/"),
                name,
                self.option,
            )
        self._links.update(odd)
        for name in sorted(set(links) - self._links):
            logger.warning(
                "Input file %s/%s is a symbolic link: it is not read (links are not followed). "
                "Put the file itself, or a hard link, in the directory.",
                self.directory.rstrip("/"),
                name,
            )
        self._links.update(links)
        return entries

    def _check_gone(
        self, listed: list[FileEntry], start: Position, end: Position | None = None
    ) -> None:
        """Fail where a file listed before, with rows after ``start`` (up to ``end``) not read
        yet, is no longer there."""
        present = {entry.name for entry in listed}
        # Files counted, and files listed before but not reached yet (their count unknown).
        for name in sorted((self._rows.keys() | self._pending) - present):
            if name < start.file or (end is not None and name > end.file):
                continue
            rows = self._rows.get(name)
            if rows == 0 or (rows is not None and name == start.file and start.row >= rows):
                continue  # nothing left to read in it: deleting it is fine
            first = start.row + 1 if name == start.file else 1
            if rows is None:
                unread = "rows" if first == 1 else f"rows from {first} on"
            else:
                unread = f"row {rows}" if first == rows else f"rows {first}-{rows}"
            raise DSparkJsonError(
                f"Input file {mask_uris(self.directory).rstrip('/')}/{name} disappeared before the "
                "query "
                f"read its {unread}. Leave input files in place until the query has read them; "
                "put it back, or start the query again with a new checkpoint."
            )
        self._pending = present

    def end(self) -> Position:
        """The position after every row visible now (only the last file is counted)."""
        listed = self._list()
        return Position(listed[-1].name, self.rows(listed[-1])) if listed else Position()

    def advance(
        self,
        start: Position,
        *,
        max_rows: int | None = None,
        max_files: int | None = None,
        cap: Position | None = None,
    ) -> Position:
        """The furthest position after ``start`` within the limits; ``start`` if nothing is new."""
        end, rows_taken, files_taken = start, 0, 0
        self._move_to(start.file)
        listed = self._list()
        self._check_gone(listed, start)
        self._warn_late(listed, start)
        for entry in listed:
            if entry.name < start.file:
                continue
            if cap is not None and entry.name > cap.file:
                break
            if max_files is not None and files_taken >= max_files:
                break
            rows = self.rows(entry)
            available = min(rows, cap.row) if cap is not None and entry.name == cap.file else rows
            first = start.row if entry.name == start.file else 0
            take = available - first
            if take <= 0:
                continue
            if max_rows is not None:
                take = min(take, max_rows - rows_taken)
            end = Position(entry.name, first + take)
            rows_taken += take
            files_taken += 1
            if max_rows is not None and rows_taken >= max_rows:
                break
        return end

    def segments(self, start: Position, end: Position) -> list[Segment]:
        """The rows between two positions, as per-file segments."""
        out = []
        self._move_to(min(start.file, self._after))
        listed = self._list()
        self._check_gone(listed, start, end)
        if end.row > 0 and end.file not in {entry.name for entry in listed}:
            raise DSparkJsonError(
                f"Input file {mask_uris(self.directory).rstrip('/')}/{end.file} is gone, but the "
                "query's "
                f"offsets include its first {end.row} rows (a micro-batch being run again "
                "after a restart). Put the file back, or start the query again with a new "
                "checkpoint."
            )
        for entry in listed:
            if entry.name < start.file:
                continue
            if entry.name > end.file:
                break
            first = start.row if entry.name == start.file else 0
            last = end.row if entry.name == end.file else self.rows(entry)
            if last > first:
                out.append(Segment(entry.path, first, last, storage=self.storage))
        return out

    def locate(self, segment: Segment) -> Segment:
        """``segment`` with where its rows lie in the file, when the file was indexed."""
        index = self._index.get(segment.path.rsplit("/", 1)[-1])
        if index is None:
            return segment
        streamed = index.starts is None and not segment.path.endswith(".parquet")
        return replace(segment, window=index.window(segment.start, segment.end), streamed=streamed)

    def _warn_late(self, listed: list[FileEntry], start: Position) -> None:
        """Say so when a file shows up with a name before the stream's position."""
        names = {entry.name for entry in listed} | set(self._before)
        if self._seen is not None:
            for name in sorted(names - self._seen):
                if name < start.file:
                    logger.warning(
                        "Prompt file %r appeared after the stream had moved past its name "
                        "(offset file %r); it will not be read. Name new files so they sort "
                        "after existing ones, e.g. with a timestamp prefix.",
                        name,
                        start.file,
                    )
            self._seen |= names
        else:
            self._seen = names


def _part(segment: Segment, start: int, end: int) -> Segment:
    """Rows ``[start, end)`` of ``segment``'s file, not yet located."""
    return Segment(segment.path, start, end, storage=segment.storage)


def row_count(segments: Sequence[Segment]) -> int:
    """How many prompt rows ``segments`` hold."""
    return sum(segment.end - segment.start for segment in segments)


#: Option partitionSize left to the planner: a task's prompts, at least (the fixed default it
#: had: a small micro-batch is cut as before) and at most (a task holds its answers until its
#: rows go to Spark, a retried task sends or reads back all of them, its first rows wait on its
#: last answers).
MIN_PARTITION_SIZE = 256
MAX_PARTITION_SIZE = 2_500
#: Tasks per task slot the planner aims at: more than one, so that a slot whose task ends early
#: takes another and the tasks' own tails overlap.
TASKS_PER_SLOT = 2


def partition_size(rows: int, *, given: int | None, slots: int | None) -> int:
    """The prompts per task of a micro-batch (a batch read) of ``rows`` prompts: option
    partitionSize where ``given``; else, as Spark sizes its file sources' splits
    (``maxPartitionBytes``, ``defaultParallelism``), the rows shared by :data:`TASKS_PER_SLOT`
    tasks per slot of the cluster's ``slots``, within [:data:`MIN_PARTITION_SIZE`,
    :data:`MAX_PARTITION_SIZE`]; :data:`MIN_PARTITION_SIZE` where the slots are not known.

    A batch's tasks are never more than at the minimum (no task pays its fixed cost for fewer
    rows), and never fewer than the slots while the minimum would fill them: the requests in
    flight, option maxConcurrency per running task, are not fewer."""
    if given is not None:
        return given
    if slots is None or slots < 1:
        return MIN_PARTITION_SIZE
    share = -(-rows // (slots * TASKS_PER_SLOT))
    return max(MIN_PARTITION_SIZE, min(MAX_PARTITION_SIZE, share))


def plan_partitions(
    segments: Sequence[Segment],
    partition_size: int,
    locate: Callable[[Segment], Segment] = lambda segment: segment,
) -> list[PromptPartition]:
    """Cut segments into partitions of at most ``partition_size`` rows, keeping input order;
    ``locate`` adds where each piece lies in its file (:meth:`PromptListing.locate`).

    The rows of a file read as a stream (compressed or re-encoded: ``streamed``) that do not fit
    in the partition being filled go to one task, as ``parts`` of ``partition_size`` rows read
    one after the other: the file is decompressed once per micro-batch, not once per part
    (each part is reported in the metrics under a number of its own, after the partitions').
    """
    partitions: list[PromptPartition] = []
    current: list[Segment] = []
    room = partition_size

    def close() -> None:
        nonlocal current, room
        if current:
            partitions.append(PromptPartition(len(partitions), tuple(current)))
        current, room = [], partition_size

    for seg in segments:
        start = seg.start
        if seg.end - start > room and locate(seg).streamed:
            close()
            if seg.end - start > partition_size:
                index = len(partitions)
                parts = tuple(
                    PromptPartition(
                        index, (locate(_part(seg, s, min(s + partition_size, seg.end))),)
                    )
                    for s in range(start, seg.end, partition_size)
                )
                partitions.append(
                    PromptPartition(index, tuple(p.segments[0] for p in parts), parts=parts)
                )
                continue
        while start < seg.end:
            take = min(room, seg.end - start)
            current.append(locate(_part(seg, start, start + take)))
            start += take
            room -= take
            if room == 0:
                close()
    close()
    # Each part is named in the metrics by a number of its own, after the batch's partitions.
    numbers = itertools.count(len(partitions))
    return [
        replace(p, parts=tuple(replace(part, index=next(numbers)) for part in p.parts))
        if p.parts
        else p
        for p in partitions
    ]
