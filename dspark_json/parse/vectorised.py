"""The vectorised path both backends run (:mod:`.cpu`, :mod:`.gpu`, by composition): response
bodies -> Arrow with numba scans that check and shred each body.

No Python loop per row on the common path:

1. one numba scan over the bodies' Arrow buffer validates each body (strict JSON, UTF-8),
   checks that it fits the envelope type exactly (:mod:`dspark_json.parse.json.conform`; a body
   that repeats the shape of one before it is matched byte for byte,
   :mod:`dspark_json.parse.json.shapes`) and, in the same pass, shreds the fitting ones into
   events, which :mod:`dspark_json.parse.json.decode` turns into Arrow arrays (the GPU backend
   reads the fitting bodies with cuDF instead);
2. a second scan finds the JSON inside each choice's ``message.content`` (fences, prose, BOMs),
   checks it against the content type and shreds it the same way;
3. statuses and ``_corrupt_record`` are computed column-wise.

Rows the scans set aside (drift to rescue, values to convert, a chunk the GPU reader rejects)
go to the :class:`~dspark_json.parse.reference.ReferenceParser`, row by row, and are put back in
place, so the output equals the reference's for every row and rows out always equal bodies in.

This module holds the path's order (:class:`Vectorised`); its parts are its neighbours:
:mod:`.plan` (what is read for a schema), :mod:`.content_pass` (step 2), :mod:`.outcomes`
(the status codes, the rows set aside), :mod:`.rescued` (``_rescued_data`` of the rows that
fit but for unknown keys).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from dspark_json.buffers.arrow import (
    as_type,
    contiguous,
    shown_as_text,
    string_buffers,
    to_string_array,
)
from dspark_json.memory import keep_freed_memory_if_asked
from dspark_json.parse.calls import ToolColumns, rescued_arguments, tool_calls_column
from dspark_json.parse.content_pass import first_choices, insert_parsed, read_contents
from dspark_json.parse.finish import finish
from dspark_json.parse.found import FoundKeys, unlike_repr
from dspark_json.parse.json import (
    NO_SPARE,
    ContentScan,
    EnvelopeScan,
    TypeNodes,
    TypeTable,
    Workspace,
    json_texts,
    read_events,
    scan_codes,
    scan_content_fit,
    scan_envelope_fit,
    spare_events,
    widest_value,
)
from dspark_json.parse.outcomes import (
    NO_STATUS,
    STATUS_CORRUPT_CONTENT,
    STATUS_CORRUPT_ENVELOPE,
    STATUS_EMPTY,
    STATUS_OK,
    STATUS_TRUNCATED,
    STATUSES,
    SetAside,
)
from dspark_json.parse.parser import Reason, RescueScope
from dspark_json.parse.plan import plan_of
from dspark_json.parse.reader import JsonLines
from dspark_json.parse.reference import ReferenceParser, loads
from dspark_json.parse.rescued import Rescued
from dspark_json.parse.threads import by_row_ranges, row_ranges
from dspark_json.response.convert import arrow_schema, dump_json, text_value
from dspark_json.response.envelope import TOOL_CALLS
from dspark_json.rows import CORRUPT_RECORD, RESCUED_DATA, STATUS, data_fields

__all__ = ["Fit", "Vectorised", "as_python"]

#: The most room (event entries, 8 bytes each) a parser keeps past the events a scan wrote, for
#: its longest row: 8 MiB, room for a vLLM body of about 15 KB (a byte an event of the
#: envelope's widest, 22 events of 3 entries). Past it, a long row's scan grows its events itself.
_LONG_ROW_ROOM = 1 << 20


class Fit(Protocol):
    """Who decides the fit where the CPU scans do not: the GPU backend's device kernel
    (:class:`~dspark_json.parse.gpu.fit.DeviceFit`), with the scans' results but their events
    (the rows that fit are read by :attr:`Vectorised.lines`); rows that fit but that its
    reader reads otherwise are ``CODE_MISFIT``, and :attr:`routed` says which they were."""

    #: After :meth:`envelope` or :meth:`content`: the rows it made misfits for its reader.
    routed: np.ndarray

    def envelope(
        self, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, table: TypeTable
    ) -> EnvelopeScan:
        """What :func:`~dspark_json.parse.json.scans.scan_envelope_fit` gives."""

    def content(
        self,
        offsets: np.ndarray,
        data: np.ndarray,
        valid: np.ndarray,
        table: TypeTable,
        lenient: bool,
    ) -> ContentScan:
        """What :func:`~dspark_json.parse.json.scans.scan_content_fit` gives."""


class Vectorised:
    """Parses response bodies into the columns of ``schema`` that come from the response:
    the envelope, ``parsed``, ``_status``, ``_rescued_data`` and ``_corrupt_record``, reading
    the documents that fit from the scans' events, or with ``lines`` (a JSON lines reader: the
    GPU backend's cuDF) where one is given."""

    def __init__(
        self,
        schema: StructType,
        *,
        lines: JsonLines | None = None,
        fit: Fit | None = None,
        lenient: bool = True,
        rescue: RescueScope = "all",
    ) -> None:
        self.schema = schema
        self.lenient = lenient
        #: What ``_rescued_data`` gathers (:data:`~.parser.RescueScope`).
        self.rescue = rescue
        self.target = arrow_schema(schema)
        self.threads = _threads()
        keep_freed_memory_if_asked()  # DSPARK_JSON_KEEP_MEMORY=1: the next batch reuses them
        #: The documents that fit are read from the scans' events (:mod:`.json.decode`), or, for the
        #: GPU backend, as JSON lines by a library.
        self.lines = lines
        #: Who decides the fit instead of the CPU scans (with ``lines``: the GPU backend's
        #: device kernel), else None.
        self.fit = fit
        data = data_fields(schema)
        self._plan = plan_of(data, lines is None)
        #: Buffers for the scans' events, each one's pages faulted in once: a scan takes one
        #: per range of rows (:meth:`_scan`), and the reads give them back once the events
        #: are read (:meth:`_read`), to the next scan of this batch or of the next one.
        self._spares: list[np.ndarray] = []
        #: Those lent to the scans whose events are not read yet.
        self._lent: list[np.ndarray] = []
        #: Within a batch, the events a scan wrote in room of its own, once read: the next
        #: scan of the batch writes over them (their pages faulted in already), where a
        #: fresh parser (a Spark task's) would have no spare yet. Dropped after the batch.
        self._read_events: list[np.ndarray] = []
        #: The most events one range of a scan wrote, with room for its longest row after.
        self._wanted = 0
        #: The arrays the reads of the events use while they read, kept from batch to batch.
        self._workspace = Workspace()
        #: How many rows of the last batch the reference parser took, and why.
        self.reference_rows = 0
        self.reference_reasons: dict[str, int] = {}

    @functools.cached_property
    def reference(self) -> ReferenceParser:
        """The row-by-row parser, for the rows the scans set aside."""
        return ReferenceParser(self.schema, lenient=self.lenient)

    @functools.cached_property
    def _rescue(self) -> Rescued:
        """``_rescued_data`` for the rows that fit but for unknown keys."""
        assert self._plan is not None
        return Rescued(self.schema, self._plan, self._extras, envelope_keys=self.rescue == "all")

    def _extras(self, envelope: Any) -> dict[str, Any]:
        """What the reference parser rescues from a whole envelope (the reference parser is
        built only where a row is walked in Python)."""
        extras: dict[str, Any] = self.reference.converter.extras(envelope)
        return extras

    def parse(self, bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]) -> pa.Table:
        """One row per body, in order, on the vectorised path, whatever the batch (compiling the
        kernels as needed)."""
        try:
            return self._parse(bodies)
        finally:
            self._read_events = []

    def _parse(self, bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]) -> pa.Table:
        texts = to_string_array(bodies)
        if self._plan is None:
            self.reference_rows = len(texts)
            self.reference_reasons = {Reason.COLUMN_TYPES: len(texts)} if len(texts) else {}
            return self.reference.parse(as_python(texts))
        plan = self._plan
        n = len(texts)
        offsets, data, valid = string_buffers(texts)
        scan: Any  # an EnvelopeScan (its events a list of arrays, one per range)
        if self.fit is not None:
            scan = self.fit.envelope(offsets, data, valid, plan.envelope_table)
        else:
            scan = self._scan(
                scan_envelope_fit, offsets, data, valid, plan.envelope_table.nodes, False, True
            )
        codes = scan.codes
        found = FoundKeys.of(data, scan)
        fits = (codes == scan_codes.CODE_FITS) | (codes == scan_codes.CODE_EXTRA)
        envelopes, read = self._read(
            data,
            offsets[:-1],
            offsets[1:],
            fits,
            events=scan.events,
            table=plan.envelope_table,
            schema=plan.envelope_read,
        )
        aside = SetAside(n)
        if self.fit is not None:
            aside.add(Reason.READER_RULES, self.fit.routed)
        aside.add(Reason.ENVELOPE, codes == scan_codes.CODE_MISFIT)
        aside.add(Reason.READER, fits & ~read)
        slow = aside.rows()
        codes[slow] = scan_codes.CODE_MISFIT
        table = self._fast_columns(envelopes, codes, texts, found, aside)
        slow_rows = np.flatnonzero(aside.rows())
        self.reference_rows = len(slow_rows)
        self.reference_reasons = aside.counts()
        if not len(slow_rows):
            return table
        reference = self.reference.parse(as_python(texts.take(pa.array(slow_rows))))
        index = np.arange(n)
        index[slow_rows] = n + np.arange(len(slow_rows))
        return pa.concat_tables([table, reference]).take(pa.array(index))

    def _read(
        self,
        data: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        take: np.ndarray,
        *,
        events: list[np.ndarray],
        table: TypeTable,
        schema: pa.Schema,
    ) -> tuple[pa.Table, np.ndarray]:
        """The documents ``data[starts[i]:ends[i]]`` that fit (``take``) as a table of the read
        ``schema`` (the envelope's columns, or the content as column ``v``), and which rows were
        read: from the scan's ``events`` (all of them), or as JSON lines by :attr:`lines`
        (which may reject a chunk)."""
        wrap = schema.names == ["v"]
        if self.lines is not None:
            self._give_back(events)  # unread: the lines are read from ``data``
            return self.lines.read(
                data,
                starts,
                ends,
                take,
                schema,
                prefix=b'{"v":' if wrap else b"",
                suffix=b"}" if wrap else b"",
            )
        every = np.ones(len(starts), np.bool_)
        if wrap:
            value = read_events(
                data, events, table, schema.field("v").type, self.threads,
                text_of=_json_texts, workspace=self._workspace,
            )  # fmt: skip
            self._give_back(events)
            return pa.table([value], schema=schema), every
        root = read_events(
            data, events, table, pa.struct(list(schema)), self.threads,
            workspace=self._workspace,
        )  # fmt: skip
        self._give_back(events)
        return pa.Table.from_struct_array(root), every

    def _scan(
        self,
        kernel: Any,
        offsets: np.ndarray,
        data: np.ndarray,
        valid: np.ndarray,
        nodes: TypeNodes,
        *flags: bool,
    ) -> Any:
        """``kernel`` (a scan of :mod:`.json.scans`, of the type ``nodes``, with its ``flags``)
        over the rows of ``offsets`` by ranges, each range writing its events into a spare
        buffer where there is one (taken until :meth:`_read` has read them)."""
        n = len(offsets) - 1
        lent = []
        for _ in row_ranges(n, self.threads):
            if self._spares:
                lent.append(self._spares.pop())
            elif self._read_events:
                lent.append(self._read_events.pop())
            elif self._wanted:
                lent.append(spare_events(self._wanted + self._wanted // 8))
            else:
                lent.append(NO_SPARE)
        scan = by_row_ranges(
            kernel, n, self.threads, offsets, data, valid, nodes, *flags, apart="events",
            per_range=lambda k: (lent[k],),
        )  # fmt: skip
        self._lent.extend(spare for spare in lent if len(spare))
        # A scan grows its events where a row might not fit (each byte an event as wide as
        # the type's widest), so the room wanted past the events is that of the longest row,
        # but no more than the events themselves and _LONG_ROW_ROOM: a rare long row makes
        # its own room, as the scan grows, and leaves the parser no spare sized for it.
        longest = int(np.diff(offsets).max()) if n else 0
        most = max((len(part) for part in scan.events), default=0)
        room = 3 * (longest + 2) * widest_value(nodes)
        self._wanted = max(self._wanted, most + min(room, most + _LONG_ROW_ROOM))
        return scan

    def _give_back(self, events: list[np.ndarray]) -> None:
        """The buffers lent to the scans, whose ``events`` are read, spare again (those
        smaller than a scan now wants are dropped), and the events the scans wrote in room
        of their own free for the batch's next scan."""
        self._spares.extend(spare for spare in self._lent if len(spare) >= self._wanted)
        self._read_events.extend(
            part
            for part in events
            if len(part) and not any(np.may_share_memory(part, lent) for lent in self._lent)
        )
        self._lent = []

    def _fast_columns(
        self,
        envelopes: pa.Table,
        codes: np.ndarray,
        texts: pa.Array,
        found: FoundKeys,
        aside: SetAside,
    ) -> pa.Table:
        """The target columns, one row per body, right for the bodies that fit; sets ``aside``
        the rows that turn out not to (misfit rows are replaced afterwards anyway)."""
        plan = self._plan
        assert plan is not None
        n = envelopes.num_rows
        rows = np.arange(n)
        columns: dict[str, pa.Array] = {}
        for f in plan.envelope.fields:
            columns[f.name] = finish(
                contiguous(envelopes.column(f.name)), f.dataType, rows, aside.of(Reason.VALUES)
            )
        status = np.full(n, STATUS_EMPTY, np.int8)
        corrupt = pa.nulls(n, pa.large_string())
        contents = None
        if "choices" in columns:
            choices = columns["choices"]
            lengths = pc.fill_null(pc.list_value_length(choices), 0).to_numpy()
            status[lengths > 0] = STATUS_OK
            if plan.content is not None:
                contents = read_contents(
                    plan,
                    choices,
                    lengths,
                    aside,
                    scan_texts=self._scan_texts,
                    read_fitting=self._read,
                )
                status = contents.status
                corrupt = contents.corrupt.cast(pa.large_string())
                target = self.target.field("choices").type
                columns["choices"] = insert_parsed(choices, lengths, contents.parsed, target)
                if not plan.per_choice:
                    # The other choices' values have no column: the reference rescues them.
                    aside.add(Reason.CHOICES, lengths > 1)
                if "parsed" in self.target.names:
                    columns["parsed"] = first_choices(contents.parsed, contents.first, lengths)
        tools = None
        if plan.tools is not None and "choices" in columns:
            tools = tool_calls_column(
                columns["choices"],
                lengths,
                plan.tools,
                self.target.field(TOOL_CALLS).type,
                read=self._read,
                scan_texts=self._scan_texts,
                aside_of=aside.of,
            )
            columns[TOOL_CALLS] = tools.column
            # Where the first choice made calls, they, not the content, say how the row went.
            status[tools.made] = STATUS_OK
            status[tools.broken == 0] = STATUS_CORRUPT_CONTENT
            status[tools.broken == 1] = STATUS_TRUNCATED
            made = pa.array(tools.made)
            corrupt = pc.if_else(made, tools.corrupt.cast(pa.large_string()), corrupt)
        elif TOOL_CALLS in self.target.names:
            columns[TOOL_CALLS] = pa.nulls(n, self.target.field(TOOL_CALLS).type)
        invalid = np.flatnonzero(codes == scan_codes.CODE_INVALID)
        status[invalid] = STATUS_CORRUPT_ENVELOPE
        status[codes == scan_codes.CODE_NULL] = NO_STATUS
        columns[STATUS.name] = pa.array(STATUSES, pa.string()).take(pa.array(status))
        if len(invalid):
            index = np.arange(n)
            index[invalid] = n + np.arange(len(invalid))
            corrupt = pa.concat_arrays([corrupt, shown_as_text(texts.take(pa.array(invalid)))])
            corrupt = corrupt.take(pa.array(index))
        columns[CORRUPT_RECORD.name] = corrupt
        if RESCUED_DATA.name in self.target.names or (tools is not None and tools.drift):
            columns[RESCUED_DATA.name] = self._rescue.column(
                texts, codes, found, contents, aside.rows()
            )
        # else nobody asked for the unknown keys: none is gathered or written
        if tools is not None and tools.drift:
            columns[RESCUED_DATA.name] = self._tools_rescued(
                columns[RESCUED_DATA.name], tools, aside
            )
        return pa.Table.from_arrays(
            [as_type(columns[f.name], f.type) for f in self.target], schema=self.target
        )

    def _scan_texts(
        self, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, table: TypeTable
    ) -> tuple[Any, np.ndarray | None]:
        """The content scan of a string column (the tool calls' arguments) with ``table``, as
        the contents are scanned: by the device fit where there is one (with the rows its
        reader reads otherwise), else by the CPU scans."""
        if self.fit is not None:
            scan = self.fit.content(offsets, data, valid, table, self.lenient)
            return scan, self.fit.routed
        scan = self._scan(scan_content_fit, offsets, data, valid, table.nodes, self.lenient)
        return scan, None

    def _tools_rescued(self, rescued: pa.Array, tools: ToolColumns, aside: SetAside) -> pa.Array:
        """``_rescued_data`` with the keys of the drifting calls' arguments, for rows that
        rescue nothing else (a row that also rescues from its envelope or content goes to the
        reference parser, which orders the two)."""
        sinks = rescued_arguments(tools.drift, self.reference.converter.extras)
        rows = np.array(sorted(sinks), np.int64)
        both = rows[rescued.is_valid().to_numpy(zero_copy_only=False)[rows]]
        aside.of(Reason.TOOLS).update(both.tolist())
        alone = [row for row in rows.tolist() if sinks[row]]
        n = len(rescued)
        index = np.arange(n)
        index[alone] = n + np.arange(len(alone))
        texts = pa.array([dump_json(sinks[row]) for row in alone], rescued.type)
        return pa.concat_arrays([rescued, texts]).take(pa.array(index))


def _json_texts(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The JSON values at ``data[starts:ends]`` (valid, as the scans checked them) as a string
    column holds them, the reference parser's bytes (:func:`dump_json` of what :func:`loads`
    reads, :func:`text_value`): in compiled code, the few that need Python (a number ``repr``
    writes otherwise, a repeated or escaped key) in Python."""
    offsets, out, python, checks = json_texts(data, starts, ends)
    if len(checks):
        python[unlike_repr(out, checks)] = True
    texts = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(out))
    slow = np.flatnonzero(python)
    if not len(slow):
        return texts
    view = memoryview(data.data)
    fixed = pa.array(
        [
            text_value(loads(bytes(view[s:e]), checked=True, lenient=True))
            for s, e in zip(starts[slow].tolist(), ends[slow].tolist(), strict=True)
        ],
        pa.large_string(),
    )
    index = np.arange(len(starts))
    index[slow] = len(starts) + np.arange(len(slow))
    return pa.concat_arrays([texts, fixed]).take(pa.array(index))


def _threads() -> int:
    """Threads for the scans and reads: the task's CPUs inside a Spark task (so executors are
    not oversubscribed), else every core of this machine."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None:
        return max(1, int(context.cpus()))
    return os.cpu_count() or 1


def as_python(texts: pa.Array) -> list[str | bytes | None]:
    """Rows for the reference parser: text where it is valid UTF-8, else the raw bytes."""
    try:
        texts.validate(full=True)
        return texts.to_pylist()  # type: ignore[no-any-return]
    except pa.ArrowInvalid:
        binary = pa.large_binary() if pa.types.is_large_string(texts.type) else pa.binary()
        return texts.view(binary).to_pylist()  # type: ignore[no-any-return]
