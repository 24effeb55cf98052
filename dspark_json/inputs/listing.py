"""Input listing and offsets: JSONL files in a directory, addressed by (file name, row).

The offset model: files are taken in name order and rows within a file in line order (blank lines
do not count). An offset ``{"file": name, "row": n}`` means "every file whose name sorts before
``name``, and the first ``n`` rows of ``name``". Files are immutable once visible: a writer puts a
file in place by renaming it from a name starting with ``.`` or ``_``. A file that appears with a
name sorting before the current offset is never read; the reader says so in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from dspark_json.fs import FileEntry, list_files, read_bytes

__all__ = [
    "INPUT_SUFFIXES",
    "Position",
    "PromptListing",
    "PromptPartition",
    "Segment",
    "plan_partitions",
    "read_rows",
    "rows_of",
]

logger = logging.getLogger("dspark_json")

#: The file names read as input (JSON lines).
INPUT_SUFFIXES = (".jsonl", ".json", ".ndjson")


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
    """Rows ``[start, end)`` of one prompt file."""

    path: str
    start: int
    end: int


@dataclass(frozen=True)
class PromptPartition(InputPartition):
    """The prompts one Spark task sends: one or more segments, in input order."""

    index: int
    segments: tuple[Segment, ...]
    #: The micro-batch it belongs to, named by its end offset (Spark gives sources no batch id);
    #: ``None`` in a batch read.
    batch: str | None = None


def rows_of(data: bytes) -> list[bytes]:
    """The non-blank lines of a JSONL file: its rows."""
    return [line for line in data.splitlines() if line.strip()]


def read_rows(segment: Segment) -> list[tuple[bytes, str]]:
    """The rows of ``segment`` with where each is (``<file> row <n>``), executor side."""
    lines = rows_of(read_bytes(segment.path))[segment.start : segment.end]
    return [
        (line, f"{segment.path} row {number}")
        for number, line in enumerate(lines, start=segment.start + 1)
    ]


class PromptListing:
    """Driver-side view of the prompt directory; remembers each file's row count."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._rows: dict[str, int] = {}
        self._seen: set[str] | None = None  # names listed by an earlier advance()

    def files(self) -> list[tuple[FileEntry, int]]:
        """Every visible prompt file with its row count, in name order."""
        listed = list_files(self.directory, suffixes=INPUT_SUFFIXES)
        for entry in listed:
            if entry.name not in self._rows:
                self._rows[entry.name] = len(rows_of(read_bytes(entry.path)))
        return [(entry, self._rows[entry.name]) for entry in listed]

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
        for entry, rows in self.files():
            if entry.name < start.file or entry.name > end.file:
                continue
            first = start.row if entry.name == start.file else 0
            last = end.row if entry.name == end.file else rows
            if last > first:
                out.append(Segment(entry.path, first, last))
        return out

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


def plan_partitions(segments: Sequence[Segment], partition_size: int) -> list[PromptPartition]:
    """Cut segments into partitions of at most ``partition_size`` rows, keeping input order."""
    partitions: list[PromptPartition] = []
    current: list[Segment] = []
    room = partition_size
    for seg in segments:
        start = seg.start
        while start < seg.end:
            take = min(room, seg.end - start)
            current.append(Segment(seg.path, start, start + take))
            start += take
            room -= take
            if room == 0:
                partitions.append(PromptPartition(len(partitions), tuple(current)))
                current, room = [], partition_size
    if current:
        partitions.append(PromptPartition(len(partitions), tuple(current)))
    return partitions
