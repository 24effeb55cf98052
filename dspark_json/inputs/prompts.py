"""Prompt rows: a JSON line -> a :class:`~dspark_json.records.PromptRecord` (the messages to send,
the fields passed through as columns, or why the row cannot be sent), and the pass-through
columns typed from a sample.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

from pyspark.sql.types import DataType, NullType, StructField

from dspark_json.inputs.listing import PromptListing, Segment, read_rows
from dspark_json.records import PromptRecord
from dspark_json.rows import ENVELOPE_COLUMNS, SYSTEM_COLUMNS
from dspark_json.schema.inference import merge_types, scalar_type

__all__ = ["infer_passthrough", "passthrough_column", "prompt_record", "read_segment"]

logger = logging.getLogger("dspark_json")

_NOT_PASSED_THROUGH = ("messages", "custom_id", "method", "url", "body")
_BATCH_URLS = ("/v1/chat/completions", "/chat/completions")
_RESERVED = frozenset({*ENVELOPE_COLUMNS, *SYSTEM_COLUMNS, "parsed", "custom_id"})


def read_segment(segment: Segment) -> Iterator[PromptRecord]:
    """The prompt records of one segment (executor side)."""
    for line, where in read_rows(segment):
        yield _record(line.decode("utf-8", errors="replace"), where)


def _record(raw: str, where: str) -> PromptRecord:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        return PromptRecord(
            custom_id=None,
            messages=None,
            fields={},
            raw=raw,
            where=where,
            problem=f"not valid JSON ({exc.msg})",
        )
    if not isinstance(obj, dict):
        return PromptRecord(
            custom_id=None,
            messages=None,
            fields={},
            raw=raw,
            where=where,
            problem="not a JSON object",
        )
    return prompt_record(obj, raw, where)


def prompt_record(obj: dict[str, Any], raw: str, where: str) -> PromptRecord:
    """A prompt row from its JSON object: ``{"prompt": ...}``, ``{"messages": [...]}``, or the
    OpenAI batch input format ``{"custom_id", "method", "url", "body": {"messages", ...}}``."""
    custom_id = obj.get("custom_id")
    custom_id = None if custom_id is None else str(custom_id)
    fields = {k: v for k, v in obj.items() if k not in _NOT_PASSED_THROUGH}
    row: dict[str, Any] = {"custom_id": custom_id, "fields": fields, "raw": raw, "where": where}
    overrides = None
    if isinstance(obj.get("body"), dict) and ("url" in obj or "method" in obj):
        url, method = obj.get("url", _BATCH_URLS[0]), str(obj.get("method", "POST")).upper()
        if url not in _BATCH_URLS or method != "POST":
            problem = (
                f"batch input line asks for {method} {url}; dspark-json sends chat completions "
                f"(POST {_BATCH_URLS[0]})"
            )
            return PromptRecord(**row, messages=None, problem=problem)
        overrides = {k: v for k, v in obj["body"].items() if k != "messages"}
        obj = obj["body"]
    messages = obj.get("messages")
    prompt = obj.get("prompt")
    if isinstance(messages, list) and messages:
        return PromptRecord(**row, messages=messages, overrides=overrides)
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
        return PromptRecord(**row, messages=messages, overrides=overrides)
    problem = "neither a 'prompt' string nor a non-empty 'messages' list"
    return PromptRecord(**row, messages=None, problem=problem)


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
                    types[key] = merge_types(types.get(key, NullType()), scalar_type(value))
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
