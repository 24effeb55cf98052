"""The tool calls on the vectorised path: column ``tool_calls`` from the envelope's
``choices[].message.tool_calls`` (read by the envelope scan), each function's arguments
strings scanned and shredded as a whole column, as the contents are (the same compiled content
scan, with the function's type table): no Python per row.

The rules are the reference parser's (:meth:`~dspark_json.parse.reference.ReferenceParser`
``._tool_calls``); rows that need more than the common case go to it: a call of a function not
offered, arguments that are null, do not fit their type, or hold keys the type lacks (drift to
rescue), and values to convert.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import ArrayType, DataType, StringType, StructField, StructType

from dspark_json.parse.arrow import contiguous, string_buffers
from dspark_json.parse.convert import arrow_schema
from dspark_json.parse.envelope import message_type
from dspark_json.parse.finish import finish, read_type
from dspark_json.parse.json import TypeTable, compile_type, scan_codes, scan_content_fit
from dspark_json.parse.parser import Reason
from dspark_json.parse.threads import by_row_ranges

__all__ = ["ToolPlan", "tool_calls_column", "tools_reachable"]


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
    threads: int,
    lenient: bool,
    aside_of: Callable[[Reason], set[int]],
) -> tuple[pa.Array, np.ndarray, np.ndarray, pa.Array]:
    """Column ``tool_calls`` (of Arrow type ``target``) from each row's first choice; which
    rows' first choice made calls; per row the first broken call's status code (-1: none;
    else 0 ``corrupt_content``, 1 ``truncated``) and its arguments (``_corrupt_record``).
    Rows that need the reference parser are added to ``aside_of(Reason.TOOLS)`` (or
    ``VALUES``)."""
    n = len(lengths)
    calls = _Calls.of(choices, lengths, pa.array([p.name for p in plans], pa.string()))
    aside_of(Reason.TOOLS).update(np.unique(calls.rows[~calls.usable]).tolist())
    broken_calls: list[np.ndarray] = []
    broken_codes: list[np.ndarray] = []
    fields: list[pa.Array] = []
    for plan, field in zip(plans, target, strict=True):
        column, broken, code = _function(
            plan, field.type, calls, read=read, threads=threads, lenient=lenient, aside_of=aside_of
        )
        fields.append(column)
        broken_calls.append(broken)
        broken_codes.append(code)
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
    return column, calls.made, status, corrupt


def _function(
    plan: ToolPlan,
    list_type: pa.DataType,
    calls: _Calls,
    *,
    read: Read,
    threads: int,
    lenient: bool,
    aside_of: Callable[[Reason], set[int]],
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """One function's calls as a list per row, and its broken calls (their index among all
    calls, and their status code)."""
    index = np.flatnonzero(_numpy(pc.fill_null(pc.equal(calls.names, plan.name), False)))
    texts = calls.arguments.take(pa.array(index))
    offsets, data, valid = string_buffers(texts)
    starts, ends, codes, _deep, _rows, _spans, events, _nrows, _nested = by_row_ranges(
        scan_content_fit, len(texts), threads, offsets, data, valid,
        plan.table.arrays(), lenient, apart=6,
    )  # fmt: skip
    fitting = (codes == scan_codes.CODE_FITS) | (codes == scan_codes.CODE_EXTRA)
    values, was_read = read(
        data, starts, ends, fitting, events=events, table=plan.table, schema=plan.read
    )
    codes[fitting & ~was_read] = scan_codes.CODE_MISFIT
    owners = calls.rows[index]
    # Drift (keys to rescue, values of another type) is the reference parser's.
    drift = (codes == scan_codes.CODE_MISFIT) | (codes == scan_codes.CODE_EXTRA)
    aside_of(Reason.TOOLS).update(np.unique(owners[drift]).tolist())
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
    return column, index[broken], code[broken]


def _numpy(array: pa.Array) -> np.ndarray:
    out: np.ndarray = array.to_numpy(zero_copy_only=False)
    return out


def _children(array: pa.Array) -> dict[str, pa.Array]:
    """A struct array's children by name, each null where the struct is."""
    return {f.name: child for f, child in zip(array.type, array.flatten(), strict=True)}
