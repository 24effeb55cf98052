"""The tool calls on the vectorised path: column ``tool_calls`` from the envelope's
``choices[].message.tool_calls`` (read by the envelope scan), each function's arguments
strings scanned and shredded as a whole column, as the contents are (the same compiled content
scan, with the function's type table): no Python per row.

The rules are the reference parser's (:meth:`~dspark_json.parse.reference.ReferenceParser`
``._tool_calls``); rows that need more than the common case go to it: a call of a function not
offered, arguments that are null or hold a value of another type than its column, and values
to convert. Keys the arguments' type lacks are rescued from those arguments alone
(:func:`rescued_arguments`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import ArrayType, DataType, StringType, StructField, StructType

from dspark_json.buffers.arrow import contiguous, string_buffers
from dspark_json.parse.finish import finish, read_type
from dspark_json.parse.json import TypeTable, compile_type, scan_codes
from dspark_json.parse.parser import Reason
from dspark_json.response.convert import arrow_schema
from dspark_json.response.envelope import TOOL_CALLS, message_type
from dspark_json.response.rules import json_float

__all__ = [
    "ScanTexts",
    "ToolColumns",
    "ToolPlan",
    "rescued_arguments",
    "tool_calls_column",
    "tools_reachable",
]


@dataclass(frozen=True)
class ToolPlan:
    """One function's arguments: its type, its type table, and the read schema (column ``v``)."""

    name: str
    dtype: DataType
    table: TypeTable
    read: pa.Schema

    @classmethod
    def of(cls, name: str, dtype: DataType, json_text: bool) -> ToolPlan:
        return cls(
            name=name,
            dtype=dtype,
            table=compile_type(dtype, json_text=json_text),
            read=arrow_schema(StructType([StructField("v", read_type(dtype))])),
        )


def tools_reachable(envelope: StructType) -> bool:
    """Whether the envelope type reads what the tool calls need: ``finish_reason`` and each
    call's ``id`` and ``function.name`` / ``function.arguments`` as strings."""
    message = message_type(envelope)
    if message is None or "tool_calls" not in message.names:
        return False
    calls = message["tool_calls"].dataType
    if not (isinstance(calls, ArrayType) and isinstance(calls.elementType, StructType)):
        return False
    call = calls.elementType
    if "id" not in call.names or not isinstance(call["id"].dataType, StringType):
        return False
    function = call["function"].dataType if "function" in call.names else None
    if not isinstance(function, StructType):
        return False
    choice = envelope["choices"].dataType.elementType  # type: ignore[attr-defined]
    return (
        all(
            n in function.names and function[n].dataType == StringType()
            for n in ("name", "arguments")
        )
        and "finish_reason" in choice.names
    )


Read = Callable[..., tuple[pa.Table, np.ndarray]]
#: The content scan over a string column's buffers with a type table: (the scan's result, the
#: rows its reader reads otherwise, or None): the CPU scans or the GPU backend's device fit.
ScanTexts = Callable[[np.ndarray, np.ndarray, np.ndarray, TypeTable], tuple[Any, np.ndarray | None]]
#: A call whose arguments hold keys their type lacks: (row, function, its position among the
#: row's calls of that function, the arguments' JSON).
Drift = tuple[int, str, int, bytes]


@dataclass(frozen=True)
class ToolColumns:
    """What the tool pass gives the vectorised path."""

    column: pa.Array  # tool_calls
    made: np.ndarray  # per row: its first choice made calls (they decide its status)
    broken: np.ndarray  # per row: -1, or the first broken call's 0 corrupt_content, 1 truncated
    corrupt: pa.Array  # per row: that call's arguments (_corrupt_record)
    drift: list[Drift]  # the calls with keys to rescue


def rescued_arguments(
    drift: list[Drift], extras: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[int, dict[str, Any]]:
    """Per row with drifting calls, what the reference parser rescues from them: ``extras``
    (its converter's, for a row holding only ``tool_calls``) over those calls' arguments, each
    read by Python's json (only these calls: the rest of the row is not read again)."""
    by_row: dict[int, dict[str, list[Any]]] = {}
    for row, name, position, raw in drift:
        calls = by_row.setdefault(row, {}).setdefault(name, [])
        calls.extend([None] * (position + 1 - len(calls)))
        # Valid JSON (the scan checked it), read as the reference parser reads it.
        calls[position] = {"arguments": json.loads(raw, parse_float=json_float, strict=False)}
    return {row: extras({TOOL_CALLS: calls}) for row, calls in by_row.items()}


@dataclass(frozen=True)
class _Calls:
    """Every call of the rows' first choices, flattened in row and call order."""

    made: np.ndarray  # per row: its first choice made calls
    rows: np.ndarray  # per call: its row
    names: pa.Array
    arguments: pa.Array
    ids: pa.Array
    usable: np.ndarray  # per call: offered, arguments not null
    truncated: np.ndarray  # per row: its first choice stopped at its length

    @classmethod
    def of(cls, choices: pa.Array, lengths: np.ndarray, offered: pa.Array) -> _Calls:
        n = len(lengths)
        rows_with = np.flatnonzero(lengths > 0)
        first = np.cumsum(lengths) - lengths
        head = _children(choices.flatten().take(pa.array(first[rows_with])))
        lists = _children(head["message"])["tool_calls"]
        counts = pc.fill_null(pc.list_value_length(lists), 0).to_numpy()
        made = np.zeros(n, np.bool_)
        made[rows_with[counts > 0]] = True
        calls = pc.list_flatten(lists)
        call = _children(calls)
        function = _children(call["function"])
        names, arguments = function["name"], function["arguments"]
        usable = _numpy(pc.fill_null(pc.is_in(names, value_set=offered), False))
        usable &= _numpy(arguments.is_valid()) & _numpy(calls.is_valid())
        truncated = np.zeros(n, np.bool_)
        truncated[rows_with] = _numpy(
            pc.fill_null(pc.equal(head["finish_reason"], "length"), False)
        )
        return cls(
            made=made,
            rows=rows_with[pc.list_parent_indices(lists).to_numpy()],
            names=names,
            arguments=arguments,
            ids=call["id"],
            usable=usable,
            truncated=truncated,
        )


def tool_calls_column(
    choices: pa.Array,
    lengths: np.ndarray,
    plans: tuple[ToolPlan, ...],
    target: pa.DataType,
    *,
    read: Read,
    scan_texts: ScanTexts,
    aside_of: Callable[[Reason], set[int]],
) -> ToolColumns:
    """Column ``tool_calls`` (of Arrow type ``target``) from each row's first choice, and what
    the rows' statuses and rescue need (:class:`ToolColumns`). Rows that need the reference
    parser are added to ``aside_of(Reason.TOOLS)`` (or ``VALUES``)."""
    n = len(lengths)
    calls = _Calls.of(choices, lengths, pa.array([p.name for p in plans], pa.string()))
    aside_of(Reason.TOOLS).update(np.unique(calls.rows[~calls.usable]).tolist())
    broken_calls: list[np.ndarray] = []
    broken_codes: list[np.ndarray] = []
    fields: list[pa.Array] = []
    drift: list[Drift] = []
    for plan, field in zip(plans, target, strict=True):
        column, broken, code, found = _function(
            plan, field.type, calls, read=read, scan_texts=scan_texts, aside_of=aside_of
        )
        fields.append(column)
        broken_calls.append(broken)
        broken_codes.append(code)
        drift += found
    column = pa.StructArray.from_arrays(fields, fields=list(target), mask=pa.array(~calls.made))
    status = np.full(n, -1, np.int8)
    corrupt_index = np.full(n, -1, np.int64)
    where = np.concatenate(broken_calls)
    codes = np.concatenate(broken_codes)
    order = np.argsort(where, kind="stable")
    where, codes = where[order], codes[order]
    owners = calls.rows[where]
    _, first_of_row = np.unique(owners, return_index=True)  # calls in order: the first
    status[owners[first_of_row]] = codes[first_of_row]
    corrupt_index[owners[first_of_row]] = where[first_of_row]
    corrupt = calls.arguments.take(pa.array(corrupt_index, mask=corrupt_index < 0))
    return ToolColumns(column, calls.made, status, corrupt, drift)


def _function(
    plan: ToolPlan,
    list_type: pa.DataType,
    calls: _Calls,
    *,
    read: Read,
    scan_texts: ScanTexts,
    aside_of: Callable[[Reason], set[int]],
) -> tuple[pa.Array, np.ndarray, np.ndarray, list[Drift]]:
    """One function's calls as a list per row, its broken calls (their index among all calls,
    and their status code), and its calls with keys to rescue."""
    index = np.flatnonzero(_numpy(pc.fill_null(pc.equal(calls.names, plan.name), False)))
    texts = calls.arguments.take(pa.array(index))
    offsets, data, valid = string_buffers(texts)
    scan, routed = scan_texts(offsets, data, valid, plan.table)
    starts, ends, codes = scan.starts, scan.ends, scan.codes
    fitting = (codes == scan_codes.CODE_FITS) | (codes == scan_codes.CODE_EXTRA)
    values, was_read = read(
        data, starts, ends, fitting, events=scan.events, table=plan.table, schema=plan.read
    )
    codes[fitting & ~was_read] = scan_codes.CODE_MISFIT
    owners = calls.rows[index]
    if routed is not None:  # the GPU backend's reader reads these otherwise
        aside_of(Reason.READER_RULES).update(np.unique(owners[routed]).tolist())
    # Values of another type are the reference parser's; keys the type lacks (CODE_EXTRA: the
    # values read fit) are rescued from the arguments alone (:func:`rescued_arguments`).
    aside_of(Reason.TOOLS).update(np.unique(owners[codes == scan_codes.CODE_MISFIT]).tolist())
    parsed = finish(contiguous(values.column("v")), plan.dtype, owners, aside_of(Reason.VALUES))
    broken = (codes == scan_codes.CODE_INVALID) | (codes == scan_codes.CODE_NONE)
    code = ((codes == scan_codes.CODE_INVALID) & calls.truncated[owners]).astype(np.int8)
    call_type = list_type.value_type
    entry = pa.StructArray.from_arrays(
        [
            calls.ids.take(pa.array(index)).cast(call_type.field("id").type),
            parsed.cast(call_type.field("arguments").type),
        ],
        fields=list(call_type),
    )
    per_row = np.bincount(owners, minlength=len(calls.made))
    offsets = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)
    column = pa.ListArray.from_arrays(
        pa.array(offsets), entry, type=list_type, mask=pa.array(per_row == 0)
    )
    extra = np.flatnonzero(codes == scan_codes.CODE_EXTRA)
    view = memoryview(data.data)
    drift = [
        (int(owners[k]), plan.name, k - int(offsets[owners[k]]), bytes(view[starts[k] : ends[k]]))
        for k in extra.tolist()
    ]
    return column, index[broken], code[broken], drift


def _numpy(array: pa.Array) -> np.ndarray:
    out: np.ndarray = array.to_numpy(zero_copy_only=False)
    return out


def _children(array: pa.Array) -> dict[str, pa.Array]:
    """A struct array's children by name, each null where the struct is."""
    return {f.name: child for f, child in zip(array.type, array.flatten(), strict=True)}
