"""Prompt rows: a JSON line -> a :class:`~dspark_json.records.PromptRecord` (the messages to send,
the fields passed through as columns, or why the row cannot be sent), and the pass-through
columns typed from a sample.

A line is sent only if it is JSON that can be sent as it was written: valid UTF-8 (a wrong byte
is never replaced by U+FFFD in silence), nested at most :data:`~dspark_json.rows.MAX_NESTING`
levels (checked before parsing, which recurses), without a lone surrogate escape (``"\ud800"``,
which UTF-8 cannot carry) and without an integer beyond Python's digit limit. Any other line is
an ``invalid_prompt`` row that says why.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from pyspark.sql.types import DataType, NullType, StructField

from dspark_json.errors import OptionError, mask_uris
from dspark_json.inputs.listing import PromptListing, Segment, read_rows
from dspark_json.records import PromptRecord
from dspark_json.response.envelope import ENVELOPE_COLUMNS
from dspark_json.rows import SYSTEM_COLUMNS, load_json
from dspark_json.schema.inference import merge_types, scalar_type
from dspark_json.storage import StorageSettings

__all__ = [
    "infer_passthrough",
    "passthrough_column",
    "passthrough_row",
    "prompt_record",
    "read_segment",
]

logger = logging.getLogger("dspark_json")

_NOT_PASSED_THROUGH = ("messages", "custom_id", "method", "url", "body")
_BATCH_URLS = ("/v1/chat/completions", "/chat/completions")
_RESERVED = frozenset({*ENVELOPE_COLUMNS, *SYSTEM_COLUMNS, "parsed", "custom_id"})
# A \u escape of a surrogate (paired ones are fine; json.loads turns a lone one into text that
# UTF-8 cannot encode).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def read_segment(segment: Segment) -> Iterator[PromptRecord]:
    """The prompt records of one segment (executor side)."""
    for line, where in read_rows(segment):
        yield _record(line, where)


def _record(line: bytes, where: str) -> PromptRecord:
    try:
        raw = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        shown = line.decode("utf-8", errors="replace")
        return _invalid(
            shown, where, f"not valid UTF-8 (byte 0x{line[exc.start]:02x} at byte {exc.start + 1})"
        )
    try:
        obj = load_json(raw)
    except json.JSONDecodeError as exc:
        return _invalid(raw, where, f"not valid JSON ({exc.msg})")
    except ValueError as exc:  # nested too deep, or an integer beyond Python's digit limit
        return _invalid(raw, where, f"not usable JSON ({str(exc).split(';')[0]})")
    if not isinstance(obj, dict):
        return _invalid(raw, where, "not a JSON object")
    if _SURROGATE_ESCAPE.search(line):
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return _invalid(
                raw, where, "a \\u escape makes a lone surrogate, which UTF-8 cannot send"
            )
    return prompt_record(obj, raw, where)


def _invalid(raw: str, where: str, problem: str) -> PromptRecord:
    return PromptRecord(
        custom_id=None, messages=None, fields={}, raw=raw, where=where, problem=problem
    )


def prompt_record(obj: dict[str, Any], raw: str, where: str) -> PromptRecord:
    """A prompt row from its JSON object: ``{"prompt": ...}``, ``{"messages": [...]}``, or the
    OpenAI batch input format ``{"custom_id", "method", "url", "body": {"messages", ...}}``.

    A line's ``model`` (``body.model`` in a batch line) is the model its request asks, instead
    of option ``model`` (requests go only to the endpoints that serve it:
    :mod:`dspark_json.http.replicas`); a plain line's ``model`` is still passed through, as
    column ``input_model``."""
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
    elif "model" in obj:  # the line's own model; its column (input_model) stays as well
        overrides = {"model": obj["model"]}
    if overrides is not None and "model" in overrides:
        model = overrides["model"]
        if not isinstance(model, str) or not model.strip():
            shown = repr(model)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            problem = (
                f"'model' must name the model to ask (a non-empty string), got {shown}; "
                "leave it out to ask option 'model'"
            )
            return PromptRecord(**row, messages=None, problem=problem)
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
    first: dict[str, str] = {}  # a field -> where the sample first has it
    seen = 0
    for segment in listing.sample(sample_rows):  # only what is sampled is counted and read
        wanted = replace(segment, end=min(segment.end, segment.start + sample_rows - seen))
        for record in read_segment(wanted):
            seen += 1
            for key, value in record.fields.items():
                first.setdefault(key, mask_uris(record.where))
                if value is not None:
                    types[key] = merge_types(types.get(key, NullType()), scalar_type(value))
        if seen >= sample_rows:
            break
    _check_one_field_per_column(first, listing.option)
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


def passthrough_row(fields: dict[str, Any]) -> dict[str, Any]:
    """One row's prompt fields by the column each is passed through as
    (:func:`passthrough_column`). Where a row has both a field named like an output column and
    the field named like its renamed column (``model`` and ``input_model``: the sample that
    typed the columns had not both, else ``.load()`` failed), the field named like the column
    keeps it, and the other is kept under its own name: no column of the prompts, so it lands
    in ``_rescued_data``, not lost."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        column = passthrough_column(key)
        out[key if column != key and column in fields else column] = value
    return out


def _check_one_field_per_column(fields: dict[str, str], option: str) -> None:
    """Fail where two prompt fields of the sample would be passed through as one column (a
    field named like an output column, ``model``, and one named like its renamed column,
    ``input_model``): Spark refuses a schema with a column twice, at the first batch."""
    for field, where in fields.items():
        column = passthrough_column(field)
        if column != field and column in fields:
            raise OptionError(
                f"The prompt files ({option}) have both a field {field!r} (first at {where}) and "
                f"a field {column!r} (first at {fields[column]}): a field named like an output "
                f"column is passed through as 'input_<name>', so both would be column "
                f"{column!r}. Rename field {column!r} in the prompt files (or leave one of the "
                "two out)."
            )


def line_models(
    prompts: str, *, storage: StorageSettings, sample_rows: int = 200
) -> dict[str, int]:
    """The models the first ``sample_rows`` lines under ``prompts`` name (a line's ``model``,
    or ``body.model`` in an OpenAI batch line), each with how many lines name it; checked at
    ``.load()`` against the models the endpoints serve
    (:func:`dspark_json.http.preflight.check_line_models`). Nothing where the directory does
    not exist yet: the schema's sample of the input says so, naming option ``prompts``."""
    named: dict[str, int] = {}
    seen = 0
    try:
        listing = PromptListing(prompts, storage=storage, option="prompts")
        segments = listing.sample(sample_rows)  # only what is sampled is counted and read
        for segment in segments:
            wanted = replace(segment, end=min(segment.end, segment.start + sample_rows - seen))
            for record in read_segment(wanted):
                seen += 1
                model = (record.overrides or {}).get("model")
                if record.problem is None and isinstance(model, str):
                    named[model] = named.get(model, 0) + 1
            if seen >= sample_rows:
                break
    except OptionError:
        return named
    return named
