"""Prompt input: JSONL files in a directory, addressed by (file name, row).

The offset model: files are taken in name order and rows within a file in line order (blank lines
do not count). An offset ``{"file": name, "row": n}`` means "every file whose name sorts before
``name``, and the first ``n`` rows of ``name``". Files are immutable once visible: a writer puts a
file in place by renaming it from a name starting with ``.`` or ``_``. A file that appears with a
name sorting before the current offset is never read; the reader says so in the log.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    NullType,
    StringType,
    StructField,
)

from dspark_json.fs import FileEntry, list_files, read_bytes
from dspark_json.inference import merge_types
from dspark_json.schema import ENVELOPE_COLUMNS, SYSTEM_COLUMNS

__all__ = [
    "PROMPT_SUFFIXES",
    "Position",
    "PromptListing",
    "PromptPartition",
    "PromptRecord",
    "Segment",
    "infer_passthrough",
    "passthrough_column",
    "plan_partitions",
    "prompt_record",
    "read_segment",
    "rows_of",
]

logger = logging.getLogger("dspark_json")

PROMPT_SUFFIXES = (".jsonl", ".json", ".ndjson")
_NOT_PASSED_THROUGH = ("messages", "custom_id", "method", "url", "body")
_BATCH_URLS = ("/v1/chat/completions", "/chat/completions")
_RESERVED = frozenset({*ENVELOPE_COLUMNS, *SYSTEM_COLUMNS, "parsed", "custom_id"})


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


@dataclass(frozen=True)
class PromptRecord:
    """One prompt row: the chat messages to send, or why the row cannot be sent."""

    custom_id: str | None
    messages: list[Any] | None
    fields: dict[str, Any]
    raw: str
    where: str
    problem: str | None = None
    #: Request fields of its own (a row in the OpenAI batch input format); they win.
    overrides: dict[str, Any] | None = None

    def describe(self) -> str:
        """How to point a user at this row: its custom_id, else its file and row number."""
        return f"custom_id {self.custom_id!r} ({self.where})" if self.custom_id else self.where


def rows_of(data: bytes) -> list[bytes]:
    """The non-blank lines of a JSONL file: its rows."""
    return [line for line in data.splitlines() if line.strip()]


class PromptListing:
    """Driver-side view of the prompt directory; remembers each file's row count."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._rows: dict[str, int] = {}
        self._seen: set[str] | None = None  # names listed by an earlier advance()

    def files(self) -> list[tuple[FileEntry, int]]:
        """Every visible prompt file with its row count, in name order."""
        listed = list_files(self.directory, suffixes=PROMPT_SUFFIXES)
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


def read_segment(segment: Segment) -> Iterator[PromptRecord]:
    """The prompt records of one segment (executor side)."""
    lines = rows_of(read_bytes(segment.path))[segment.start : segment.end]
    for number, line in enumerate(lines, start=segment.start + 1):
        yield _record(line.decode("utf-8", errors="replace"), f"{segment.path} row {number}")


def _record(raw: str, where: str) -> PromptRecord:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        return PromptRecord(None, None, {}, raw, where, f"not valid JSON ({exc.msg})")
    if not isinstance(obj, dict):
        return PromptRecord(None, None, {}, raw, where, "not a JSON object")
    return prompt_record(obj, raw, where)


def prompt_record(obj: dict[str, Any], raw: str, where: str) -> PromptRecord:
    """A prompt row from its JSON object: ``{"prompt": ...}``, ``{"messages": [...]}``, or the
    OpenAI batch input format ``{"custom_id", "method", "url", "body": {"messages", ...}}``."""
    custom_id = obj.get("custom_id")
    custom_id = None if custom_id is None else str(custom_id)
    fields = {k: v for k, v in obj.items() if k not in _NOT_PASSED_THROUGH}
    overrides = None
    if isinstance(obj.get("body"), dict) and ("url" in obj or "method" in obj):
        url, method = obj.get("url", _BATCH_URLS[0]), str(obj.get("method", "POST")).upper()
        if url not in _BATCH_URLS or method != "POST":
            problem = (
                f"batch input line asks for {method} {url}; dspark-json sends chat completions "
                f"(POST {_BATCH_URLS[0]})"
            )
            return PromptRecord(custom_id, None, fields, raw, where, problem)
        overrides = {k: v for k, v in obj["body"].items() if k != "messages"}
        obj = obj["body"]
    messages = obj.get("messages")
    prompt = obj.get("prompt")
    if isinstance(messages, list) and messages:
        return PromptRecord(custom_id, messages, fields, raw, where, overrides=overrides)
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
        return PromptRecord(custom_id, messages, fields, raw, where, overrides=overrides)
    problem = "neither a 'prompt' string nor a non-empty 'messages' list"
    return PromptRecord(custom_id, None, fields, raw, where, problem)


def infer_passthrough(listing: PromptListing, *, sample_rows: int = 1000) -> list[StructField]:
    """Columns for the prompt fields passed through, typed from a sample of the existing files.

    A field named like an output column (``id``, ``model``, ...) is renamed ``input_<name>``.
    Fields first seen after this sample land in ``_rescued_data``.
    """
    types: dict[str, DataType] = {}
    seen = 0
    for entry, _ in listing.files():
        for record in read_segment(Segment(entry.path, 0, sample_rows - seen)):
            seen += 1
            for key, value in record.fields.items():
                if value is not None:
                    types[key] = merge_types(types.get(key, NullType()), _type_of(value))
        if seen >= sample_rows:
            break
    fields = []
    for name, dtype in types.items():
        column = passthrough_column(name)
        if column != name:
            logger.warning("Prompt field %r is passed through as column %r.", name, column)
        fields.append(StructField(column, dtype))
    return fields


def passthrough_column(field: str) -> str:
    """The column a prompt field is passed through as: its name, or ``input_<name>`` where the
    name is taken by an output column (``id``, ``model``, ...)."""
    return f"input_{field}" if field in _RESERVED else field


def _type_of(value: Any) -> DataType:
    if isinstance(value, bool):
        return BooleanType()
    if isinstance(value, int):
        return LongType()
    if isinstance(value, float):
        return DoubleType()
    return StringType()
