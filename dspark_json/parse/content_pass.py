"""The content pass of the vectorised path: every choice's ``message.content`` scanned for the
JSON inside it (fences, prose, BOMs), checked against the content type and read; per row the
status and ``_corrupt_record`` its first choice gives (:func:`read_contents`); and the parsed
values put back into the choices (:func:`insert_parsed`) and the top-level ``parsed`` column
(:func:`first_choices`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dspark_json.buffers.arrow import contiguous, string_buffers, with_null_rows
from dspark_json.parse.finish import finish
from dspark_json.parse.found import FoundKeys
from dspark_json.parse.json import TypeTable, scan_codes
from dspark_json.parse.outcomes import (
    STATUS_CORRUPT_CONTENT,
    STATUS_EMPTY,
    STATUS_NOT_JSON,
    STATUS_OK,
    STATUS_TRUNCATED,
    SetAside,
)
from dspark_json.parse.parser import Reason
from dspark_json.parse.plan import Plan

__all__ = ["Contents", "first_choices", "insert_parsed", "read_contents"]

#: Scans a string column's texts with a type table: the scan (a ``ContentScan``), and the rows
#: a device fit's reader reads otherwise (None on the CPU).
ScanTexts = Callable[[np.ndarray, np.ndarray, np.ndarray, TypeTable], tuple[Any, np.ndarray | None]]
#: Reads the documents that fit: a table of the read schema, and which rows were read.
ReadFitting = Callable[..., tuple[pa.Table, np.ndarray]]


@dataclass(frozen=True)
class Contents:
    """The content pass's results: per choice the parsed value, scan code and JSON span (in
    ``data``); per row the status, ``_corrupt_record``, first choice index and choice count."""

    parsed: pa.Array
    status: np.ndarray
    corrupt: pa.Array
    first: np.ndarray
    lengths: np.ndarray
    codes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    data: np.ndarray
    found: FoundKeys


def read_contents(
    plan: Plan,
    choices: pa.Array,
    lengths: np.ndarray,
    aside: SetAside,
    *,
    scan_texts: ScanTexts,
    read_fitting: ReadFitting,
) -> Contents:
    """Parse every choice's content: the parsed value per choice, and per row the status
    and ``_corrupt_record`` from its first choice. ``scan_texts`` scans the contents (the CPU
    scans, or the device fit, with the rows its reader reads otherwise); ``read_fitting`` reads
    the ones that fit (:meth:`~dspark_json.parse.vectorised.Vectorised._read`)."""
    assert plan.content_table is not None
    assert plan.content is not None and plan.content_read is not None
    per_choice = choices.flatten()
    parents = pc.list_parent_indices(choices).to_numpy()
    fields = _children(per_choice)
    content = _children(fields["message"])["content"]
    offsets, data, valid = string_buffers(content)
    scan, routed = scan_texts(offsets, data, valid, plan.content_table)
    starts, ends, codes = scan.starts, scan.ends, scan.codes
    fitting = (codes == scan_codes.CODE_FITS) | (codes == scan_codes.CODE_EXTRA)
    values, read = read_fitting(
        data,
        starts,
        ends,
        fitting,
        events=scan.events,
        table=plan.content_table,
        schema=plan.content_read,
    )
    codes[fitting & ~read] = scan_codes.CODE_MISFIT
    if routed is not None:
        aside.of(Reason.READER_RULES).update(parents[routed].tolist())
    aside.of(Reason.CONTENT).update(parents[codes == scan_codes.CODE_MISFIT].tolist())
    parsed = finish(contiguous(values.column("v")), plan.content, parents, aside.of(Reason.VALUES))

    first = np.cumsum(lengths) - lengths
    has_first = lengths > 0
    head = first[has_first]
    head_codes = codes[head]
    head_length = pc.equal(fields["finish_reason"].take(pa.array(head)), "length")
    truncated = pc.fill_null(head_length, False).to_numpy(zero_copy_only=False)
    status_head = np.full(len(head), STATUS_NOT_JSON, np.int8)
    status_head[(head_codes == scan_codes.CODE_FITS) | (head_codes == scan_codes.CODE_EXTRA)] = (
        STATUS_OK
    )
    broken = head_codes == scan_codes.CODE_INVALID
    status_head[broken] = np.where(truncated[broken], STATUS_TRUNCATED, STATUS_CORRUPT_CONTENT)
    status = np.full(len(lengths), STATUS_EMPTY, np.int8)
    status[has_first] = status_head

    corrupt_index = np.full(len(lengths), -1, np.int64)
    shows_text = (head_codes == scan_codes.CODE_INVALID) | (head_codes == scan_codes.CODE_NONE)
    corrupt_index[np.flatnonzero(has_first)[shows_text]] = head[shows_text]
    return Contents(
        parsed=parsed,
        status=status,
        corrupt=content.take(pa.array(corrupt_index, mask=corrupt_index < 0)),
        first=first,
        lengths=lengths,
        codes=codes,
        starts=starts,
        ends=ends,
        data=data,
        found=FoundKeys.of(data, scan),
    )


def first_choices(per_choice: pa.Array, first: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Each row's first choice's value (null where a row has none), from the values of every
    choice (``first[row]``: where the row's choices start)."""
    if len(per_choice) == len(lengths) and (lengths == 1).all():
        return per_choice  # one choice per row, the usual answer: no copy
    if (lengths <= 1).all():  # and some rows without one: their rows put in
        return with_null_rows(per_choice, lengths == 1)
    return per_choice.take(pa.array(first, mask=lengths == 0))


def _children(array: pa.Array) -> dict[str, pa.Array]:
    """A struct array's children by name, each null where the struct is."""
    return {f.name: child for f, child in zip(array.type, array.flatten(), strict=True)}


def insert_parsed(
    choices: pa.Array, lengths: np.ndarray, parsed: pa.Array, target: pa.DataType
) -> pa.Array:
    """``choices`` (without ``message.parsed``; ``lengths`` per row, 0 where null) rebuilt as
    ``target`` with ``parsed`` per choice."""
    per_choice = choices.flatten()
    choice_type = target.value_type
    fields = _children(per_choice)
    message_struct = choice_type.field("message").type
    message = fields["message"]
    message_fields = _children(message)
    if "parsed" in message_struct.names:
        message_fields["parsed"] = parsed
    fields["message"] = pa.StructArray.from_arrays(
        [message_fields[f.name] for f in message_struct],
        fields=list(message_struct),
        mask=message.is_null(),
    )
    choice = pa.StructArray.from_arrays(
        [fields[f.name] for f in choice_type], fields=list(choice_type), mask=per_choice.is_null()
    )
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), choice, type=target, mask=choices.is_null())
