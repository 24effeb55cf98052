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

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
from pyspark.sql.datasource import InputPartition

from dspark_json.errors import DSparkJsonError, OptionError
from dspark_json.fs import FileEntry, kind_of, list_files
from dspark_json.inputs.files import (
    INPUT_SUFFIXES,
    RowIndex,
    file_rows,
    index_rows,
    packed_rows,
    rows_of,
)

__all__ = [
    "INPUT_SUFFIXES",
    "Position",
    "PromptListing",
    "PromptPartition",
    "Segment",
    "plan_partitions",
    "read_rows",
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

    def where(self, row: int) -> str:
        """How to point a user at the file's row ``row`` (0-based): ``<file> row <n>``."""
        return f"{self.path} row {row + 1}"


@dataclass(frozen=True)
class PromptPartition(InputPartition):
    """The prompts one Spark task sends: one or more segments, in input order."""

    index: int
    segments: tuple[Segment, ...]
    #: The micro-batch it belongs to, named by its end offset (Spark gives sources no batch id);
    #: ``None`` in a batch read.
    batch: str | None = None


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
        return read(segment.path, segment.start, segment.end, segment.window)
    except FileNotFoundError as exc:
        raise DSparkJsonError(
            f"Input file {segment.path} is gone: its rows {segment.start + 1}-{segment.end} "
            "were listed for this micro-batch but cannot be read. Leave input files in place "
            "until the query has read them; put it back, or start the query again with a new "
            "checkpoint."
        ) from exc


def _check_count(segment: Segment, rows: int) -> None:
    if rows < segment.end - segment.start:
        raise DSparkJsonError(
            f"Input file {segment.path} holds {segment.start + rows} rows now, but "
            f"{segment.end} or more were counted when it was listed: input files must not "
            "change once visible (write a new file under a hidden name, then rename it into "
            "place). Put the original back."
        )


#: Row indexes of files already read, by (path, size, modification time): a batch query run
#: again over the same directory (Spark plans every action anew) reads each file once.
_INDEXES: OrderedDict[tuple[str, int, int], RowIndex] = OrderedDict()
_INDEXES_KEPT = 256


def _indexed(entry: FileEntry) -> RowIndex:
    """:func:`~dspark_json.inputs.files.index_rows` of ``entry``, remembered while the file
    keeps its size and modification time (input files do not change once visible)."""
    if entry.modified is None:
        return index_rows(entry.path)
    key = (entry.path, entry.size, entry.modified)
    with _INDEXES_LOCK:
        if key in _INDEXES:
            _INDEXES.move_to_end(key)
            return _INDEXES[key]
    index = index_rows(entry.path)
    with _INDEXES_LOCK:
        _INDEXES[key] = index
        while len(_INDEXES) > _INDEXES_KEPT:
            _INDEXES.popitem(last=False)
    return index


class PromptListing:
    """Driver-side view of the input directory; remembers each file's row count.

    ``option`` names the option the directory comes from (``prompts`` or ``responses``), for
    messages; without it, messages name both.
    """

    def __init__(self, directory: str, *, option: str | None = None) -> None:
        self.directory = directory
        self.option = f"option {option!r}" if option else "option 'prompts' / 'responses'"
        self._rows: dict[str, int] = {}  # every file ever listed -> its row count
        self._index: dict[str, RowIndex] = {}
        self._sizes: dict[str, int] = {}
        self._seen: set[str] | None = None  # names listed by an earlier advance()
        self._listed = False  # the directory has been seen

    def files(self) -> list[tuple[FileEntry, int]]:
        """Every visible input file with its row count, in name order."""
        listed = self._list()
        for entry in listed:
            if entry.name not in self._rows:
                try:
                    self._index[entry.name] = _indexed(entry)
                    self._rows[entry.name] = self._index[entry.name].rows
                except FileNotFoundError as exc:
                    raise DSparkJsonError(
                        f"Input file {entry.path} disappeared while it was being listed. Leave "
                        "input files in place until the query has read them."
                    ) from exc
                self._sizes[entry.name] = entry.size
            elif self._sizes.get(entry.name, entry.size) != entry.size:
                logger.warning(
                    "Input file %s changed size after it was counted (%d -> %d bytes): input "
                    "files must not change once visible. Rows added to it are not read; rows "
                    "taken out of it fail the query when it is read.",
                    entry.path,
                    self._sizes[entry.name],
                    entry.size,
                )
                self._sizes[entry.name] = entry.size
        return [(entry, self._rows[entry.name]) for entry in listed]

    def _list(self) -> list[FileEntry]:
        """The directory's input files; an error naming the directory where it is missing."""
        kind = kind_of(self.directory)
        if kind == "file":
            raise OptionError(
                f"{self.option.capitalize()} names {self.directory}, which is a file; give the "
                "directory that holds the input files (new files are picked up as they land)."
            )
        if kind == "missing":
            if self._listed:
                raise DSparkJsonError(
                    f"The input directory {self.directory} ({self.option}) "
                    "disappeared while the query was reading it. Put it back, or start the "
                    "query again with a new checkpoint."
                )
            raise OptionError(
                f"{self.option.capitalize()} names {self.directory}, which does not exist. Create "
                "the directory (a streaming query then picks up files as they land in it), or "
                "fix the path."
            )
        self._listed = True
        return list_files(self.directory, suffixes=INPUT_SUFFIXES)

    def _check_gone(
        self, listed: list[tuple[FileEntry, int]], start: Position, end: Position | None = None
    ) -> None:
        """Fail where a file listed before, with rows after ``start`` (up to ``end``) not read
        yet, is no longer there."""
        present = {entry.name for entry, _ in listed}
        for name, rows in sorted(self._rows.items()):
            if name in present or name < start.file or (end is not None and name > end.file):
                continue
            if rows == 0 or (name == start.file and start.row >= rows):
                continue  # nothing left to read in it: deleting it is fine
            first = start.row + 1 if name == start.file else 1
            unread = f"row {rows}" if first == rows else f"rows {first}-{rows}"
            raise DSparkJsonError(
                f"Input file {self.directory.rstrip('/')}/{name} disappeared before the query "
                f"read its {unread}. Leave input files in place until the query has read them; "
                "put it back, or start the query again with a new checkpoint."
            )

    def end(self) -> Position:
        """The position after every row visible now."""
        files = self.files()
        return Position(files[-1][0].name, files[-1][1]) if files else Position()

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
        listed = self.files()
        self._check_gone(listed, start)
        self._warn_late([e.name for e, _ in listed], start)
        for entry, rows in listed:
            if entry.name < start.file:
                continue
            if cap is not None and entry.name > cap.file:
                break
            available = min(rows, cap.row) if cap is not None and entry.name == cap.file else rows
            first = start.row if entry.name == start.file else 0
            take = available - first
            if take <= 0:
                continue
            if max_files is not None and files_taken >= max_files:
                break
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
        listed = self.files()
        self._check_gone(listed, start, end)
        if end.row > 0 and end.file not in {entry.name for entry, _ in listed}:
            raise DSparkJsonError(
                f"Input file {self.directory.rstrip('/')}/{end.file} is gone, but the query's "
                f"offsets include its first {end.row} rows (a micro-batch being run again "
                "after a restart). Put the file back, or start the query again with a new "
                "checkpoint."
            )
        for entry, rows in listed:
            if entry.name < start.file or entry.name > end.file:
                continue
            first = start.row if entry.name == start.file else 0
            last = end.row if entry.name == end.file else rows
            if last > first:
                out.append(Segment(entry.path, first, last))
        return out

    def locate(self, segment: Segment) -> Segment:
        """``segment`` with where its rows lie in the file, when the file was indexed."""
        index = self._index.get(segment.path.rsplit("/", 1)[-1])
        window = index.window(segment.start, segment.end) if index is not None else None
        return replace(segment, window=window)

    def _warn_late(self, names: list[str], start: Position) -> None:
        """Say so when a file shows up with a name before the stream's position."""
        if self._seen is not None:
            for name in names:
                if name < start.file and name not in self._seen:
                    logger.warning(
                        "Prompt file %r appeared after the stream had moved past its name "
                        "(offset file %r); it will not be read. Name new files so they sort "
                        "after existing ones, e.g. with a timestamp prefix.",
                        name,
                        start.file,
                    )
        self._seen = set(names)


def plan_partitions(
    segments: Sequence[Segment],
    partition_size: int,
    locate: Callable[[Segment], Segment] = lambda segment: segment,
) -> list[PromptPartition]:
    """Cut segments into partitions of at most ``partition_size`` rows, keeping input order;
    ``locate`` adds where each piece lies in its file (:meth:`PromptListing.locate`)."""
    partitions: list[PromptPartition] = []
    current: list[Segment] = []
    room = partition_size
    for seg in segments:
        start = seg.start
        while start < seg.end:
            take = min(room, seg.end - start)
            current.append(locate(Segment(seg.path, start, start + take)))
            start += take
            room -= take
            if room == 0:
                partitions.append(PromptPartition(len(partitions), tuple(current)))
                current, room = [], partition_size
    if current:
        partitions.append(PromptPartition(len(partitions), tuple(current)))
    return partitions
