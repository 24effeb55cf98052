"""The reference parser: response bodies -> Arrow, one row at a time with Python's json module.

It defines the row semantics (docs/ARCHITECTURE.md, "The row contract"). The vectorised CPU
parser hands it the rows it cannot take whole (drift to rescue, values to convert, edge cases),
and takes the whole batch only when the schema itself is beyond the vectorised reader (maps).
What "valid JSON" means, and where the JSON inside a message is, come from the same byte scans
the vectorised paths use (:mod:`dspark_json.parse.json`), so every path agrees on them.

``kernels=False`` gives the same answers without numba: the same rules in plain Python
(:func:`loads`' ``kernels`` flag, :func:`~dspark_json.parse.content.extract_json_python`), for the
first batches of a process whose kernels are still compiling (:mod:`.warmup`); the conformance
suite holds the two to the same output.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import ArrayType, DataType, StructType

from dspark_json.parse.content import extract_json, extract_json_python
from dspark_json.parse.json import KIND_INVALID, validate_row
from dspark_json.response.convert import Converter, arrow_schema, dump_json, is_tuple
from dspark_json.response.envelope import TOOL_CALLS, content_type, tool_types
from dspark_json.response.rules import json_float, loads_python
from dspark_json.rows import CORRUPT_RECORD, RESCUED_DATA, STATUS, Status, data_fields

__all__ = ["ReferenceParser", "decode_body", "loads"]

_FIRST_CHOICE_PARSED = "choices[0].message.parsed"


def decode_body(body: str | bytes) -> tuple[str, bytes]:
    """The body as text (invalid UTF-8 shown as U+FFFD) and as the bytes the scans read."""
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace"), body
    return body, body.encode("utf-8", "surrogatepass")


def loads(raw: bytes, *, checked: bool = False, lenient: bool = False, kernels: bool = True) -> Any:
    """The JSON value of ``raw``; ValueError when it is not valid JSON (see kernels).
    ``checked``: a scan has already validated it. ``lenient``: raw control characters are
    allowed inside strings (a message's content, where models write them). ``kernels=False``:
    validated in plain Python, by the same rules."""
    if checked:
        return json.loads(raw, parse_float=json_float, strict=not lenient)
    if not kernels:
        return loads_python(raw, lenient=lenient)
    data = np.frombuffer(raw, np.uint8)
    if validate_row(data, 0, len(raw), lenient=lenient) == KIND_INVALID:
        raise ValueError("not valid JSON")
    return json.loads(raw, parse_float=json_float, strict=not lenient)


class ReferenceParser:
    """Parses response bodies into the columns of ``schema`` that come from the response:
    the envelope, ``parsed``, ``_status``, ``_rescued_data`` and ``_corrupt_record``.
    ``lenient``: a message's content may hold raw control characters inside JSON strings
    (the envelope, which the server writes, is always strict)."""

    def __init__(self, schema: StructType, *, lenient: bool = True, kernels: bool = True) -> None:
        self.schema = schema
        self.lenient = lenient
        self.kernels = kernels
        data = data_fields(schema)
        # The first choice's content is rescued once, under "parsed", when that column exists.
        skip = (_FIRST_CHOICE_PARSED,) if "parsed" in data.names else ()
        self.converter = Converter(data, not_rescued=skip)
        self._has_parsed = "parsed" in data.names
        self._content_type = content_type(schema)
        self._tool_types = tool_types(data)

    def parse(self, bodies: Sequence[str | bytes | None]) -> pa.Table:
        rows: list[dict[str, Any]] = []
        status: list[Status | None] = []
        corrupt: list[str | None] = []
        for body in bodies:
            row, row_status, row_corrupt = self._one(body)
            rows.append(row)
            status.append(row_status)
            corrupt.append(row_corrupt)
        table, rescued = self.converter.table(rows)
        system = {
            STATUS.name: pa.array(status, pa.string()),
            CORRUPT_RECORD.name: pa.array(corrupt, pa.string()),
            RESCUED_DATA.name: pa.array(
                [dump_json(r) if r else None for r in rescued], pa.string()
            ),
        }
        target = arrow_schema(self.schema)
        columns = [system[f.name] if f.name in system else table.column(f.name) for f in target]
        return pa.Table.from_arrays(columns, schema=target)

    def _one(self, body: str | bytes | None) -> tuple[dict[str, Any], Status | None, str | None]:
        if body is None:
            return {}, None, None
        text, raw = decode_body(body)
        try:
            envelope = loads(raw, kernels=self.kernels)
        except ValueError:  # also Python's limit on the digits of an integer
            return {}, Status.CORRUPT_ENVELOPE, text
        if not isinstance(envelope, dict):
            return {}, Status.CORRUPT_ENVELOPE, text
        choices = envelope.get("choices")
        if not isinstance(choices, list) or not choices:
            return envelope, Status.EMPTY, None
        status: Status = Status.OK
        corrupt: str | None = None
        if self._content_type is not None:
            outcomes = [self._content(choice) for choice in choices]
            value, status, corrupt = outcomes[0]
            if self._has_parsed:  # else the value is only in choices[].message.parsed
                envelope["parsed"] = value
        if self._tool_types is not None:
            calls, tools_status, tools_corrupt = self._tool_calls(choices[0])
            envelope[TOOL_CALLS] = calls
            if tools_status is not None:  # the calls, not the content, say how the row went
                status, corrupt = tools_status, tools_corrupt
        return envelope, status, corrupt

    def _content(self, choice: Any) -> tuple[Any, Status, str | None]:
        """Parse one choice's content in place; return (value, status, corrupt text)."""
        message = choice.get("message") if isinstance(choice, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            return None, Status.NOT_JSON, None
        found = extract_json(content) if self.kernels else extract_json_python(content)
        if found is None:
            return None, Status.NOT_JSON, content
        try:
            value = loads(
                found.encode("utf-8", "surrogatepass"), lenient=self.lenient, kernels=self.kernels
            )
        except ValueError:
            truncated = choice.get("finish_reason") == "length"
            return None, Status.TRUNCATED if truncated else Status.CORRUPT_CONTENT, content
        if not _fits(value, self._content_type):
            return None, Status.CORRUPT_CONTENT, content
        assert isinstance(message, dict)
        message["parsed"] = value
        return value, Status.OK, None

    def _tool_calls(self, choice: Any) -> tuple[dict[str, Any] | None, Status | None, str | None]:
        """The first choice's tool calls by function name (None, and no status, where it made
        none), the row's status and ``_corrupt_record``: the first call that went wrong, in
        call order, decides them (arguments not JSON: ``corrupt_content``, or ``truncated`` at
        finish_reason length, with the arguments' text; arguments not an object where the
        parameters are: ``corrupt_content`` with the text; a function not offered:
        ``corrupt_content``, its calls kept in ``_rescued_data`` under ``tool_calls.<name>``)."""
        assert self._tool_types is not None
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not isinstance(calls, list) or not calls:
            return None, None, None
        truncated = choice.get("finish_reason") == "length"
        # A function not called is null, not an empty list: tool_calls.f[0] is then null in
        # SQL, where an empty list's [0] fails under ANSI mode (Spark 4's default).
        out: dict[str, list[Any]] = {}
        status, corrupt = Status.OK, None
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            function = function if isinstance(function, dict) else {}
            name, text = function.get("name"), function.get("arguments")
            call_id = call.get("id") if isinstance(call, dict) else None
            if isinstance(name, str) and name in self._tool_types:
                arguments, problem = self._arguments(text, self._tool_types[name], truncated)
                out.setdefault(name, []).append({"id": call_id, "arguments": arguments})
                if problem is not None and status == Status.OK:
                    status, corrupt = problem, text if isinstance(text, str) else None
                continue
            # Not offered: kept whole, under its name, in _rescued_data (the converter rescues
            # a key the struct lacks): its arguments' JSON value, or else their text.
            arguments, _ = self._arguments(text, None, truncated)
            kept = arguments if arguments is not None else text
            out.setdefault(str(name), []).append({"id": call_id, "arguments": kept})
            if status == Status.OK:
                status = Status.CORRUPT_CONTENT
        return out, status, corrupt

    def _arguments(
        self, text: Any, dtype: DataType | None, truncated: bool
    ) -> tuple[Any, Status | None]:
        """One call's arguments as a JSON value, and what was wrong (None: nothing): not JSON
        (``truncated`` where the choice stopped at its length, else ``corrupt_content``), no
        JSON in them, or not of ``dtype``'s kind (``corrupt_content``)."""
        if not isinstance(text, str):
            return None, Status.CORRUPT_CONTENT
        found = extract_json(text) if self.kernels else extract_json_python(text)
        if found is None:
            return None, Status.CORRUPT_CONTENT
        try:
            value = loads(
                found.encode("utf-8", "surrogatepass"), lenient=self.lenient, kernels=self.kernels
            )
        except ValueError:
            return None, Status.TRUNCATED if truncated else Status.CORRUPT_CONTENT
        if dtype is not None and not _fits(value, dtype):
            return None, Status.CORRUPT_CONTENT
        return value, None


def _fits(value: Any, dtype: DataType | None) -> bool:
    if isinstance(dtype, StructType):
        return isinstance(value, dict) or (isinstance(value, list) and is_tuple(dtype))
    if isinstance(dtype, ArrayType):
        return isinstance(value, list)
    return True
