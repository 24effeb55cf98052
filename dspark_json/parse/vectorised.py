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
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    DataType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
)

from dspark_json.memory import gc_paused, keep_freed_memory_if_asked
from dspark_json.parse.arrow import (
    contiguous,
    shown_as_text,
    string_buffers,
    to_string_array,
    with_null_rows,
)
from dspark_json.parse.calls import (
    ToolColumns,
    ToolPlan,
    rescued_arguments,
    tool_calls_column,
    tools_reachable,
)
from dspark_json.parse.convert import arrow_schema, dump_json, text_value
from dspark_json.parse.envelope import TOOL_CALLS, content_type, message_type, tool_types
from dspark_json.parse.finish import finish, read_type
from dspark_json.parse.found import (
    RENDERED,
    FoundKeys,
    Key,
    Place,
    RescuePaths,
    unlike_repr,
)
from dspark_json.parse.json import (
    ContentScan,
    EnvelopeScan,
    TypeTable,
    compile_type,
    json_texts,
    read_events,
    rescue_entries,
    scan_codes,
    scan_content_fit,
    scan_envelope_fit,
)
from dspark_json.parse.parser import Reason
from dspark_json.parse.reader import JsonLines
from dspark_json.parse.reference import ReferenceParser, loads
from dspark_json.parse.threads import by_row_ranges
from dspark_json.rows import Status, data_fields

__all__ = ["Fit", "Vectorised", "as_python"]

#: ``created`` and other envelope timestamps: unix seconds from year 1 to 9999.
_SECONDS = (-62135596800, 253402300799)
_STATUSES = (
    Status.OK,
    Status.EMPTY,
    Status.NOT_JSON,
    Status.CORRUPT_CONTENT,
    Status.TRUNCATED,
    Status.CORRUPT_ENVELOPE,
    None,
)
_OK, _EMPTY, _NOT_JSON, _CORRUPT_CONTENT, _TRUNCATED, _CORRUPT_ENVELOPE, _NO_STATUS = range(7)


@dataclass(frozen=True)
class _Plan:
    """What the vectorised path reads: the envelope without ``parsed``, and the content type."""

    envelope: StructType
    envelope_table: TypeTable
    envelope_read: pa.Schema
    content: DataType | None
    content_table: TypeTable | None
    content_read: pa.Schema | None
    #: Whether each message has a ``parsed`` column (else only the top level has one).
    per_choice: bool
    #: Each function's arguments, where the schema has a ``tool_calls`` column.
    tools: tuple[ToolPlan, ...] | None = None

    @classmethod
    def of(cls, data: StructType, json_text: bool = True) -> _Plan | None:
        """The plan for the data columns of a schema, or None when the schema is beyond the
        vectorised reader (the reference parser then takes every row). ``json_text``: the
        content's string columns take any JSON value as its text on the kernels' path (the
        events' reader only; a JSON lines reader does not)."""
        if "choices" not in data.names:
            # Schemas without choices (the status is "ok" when a body has some: only the
            # reference parser looks) are the reference parser's.
            return None
        parsed = content_type(data)
        envelope = _without_parsed(data)
        if not json_text and (_has_map(envelope) or (parsed is not None and _has_map(parsed))):
            # Maps for a JSON lines reader are the reference parser's; the events' reader
            # reads them, in the envelope and in the content.
            return None
        per_choice = False
        if parsed is not None:
            # The content pass needs content and finish_reason read; where both the top level
            # and each message have a parsed column, they must be one type.
            message = message_type(data)
            if not _content_reachable(envelope) or message is None:
                return None
            per_choice = "parsed" in message.names
            top = data["parsed"].dataType if "parsed" in data.names else None
            if per_choice and top is not None and message["parsed"].dataType != top:
                return None
        tools = None
        arguments = tool_types(data)
        if TOOL_CALLS in data.names:
            if arguments is None or not tools_reachable(envelope):
                return None
            if not json_text and any(_has_map(t) for t in arguments.values()):
                return None
            tools = tuple(ToolPlan.of(n, t, json_text) for n, t in arguments.items())
        content_read = None
        if parsed is not None:
            content_read = arrow_schema(StructType([StructField("v", read_type(parsed))]))
        return cls(
            envelope=envelope,
            envelope_table=compile_type(
                _guarded(envelope, tools=tools is not None),
                timestamp_range=_SECONDS,
                events=json_text,
            ),
            envelope_read=arrow_schema(read_type(envelope, seconds=True)),  # type: ignore[arg-type]
            content=parsed,
            content_table=(
                compile_type(parsed, json_text=json_text) if parsed is not None else None
            ),
            content_read=content_read,
            per_choice=per_choice,
            tools=tools,
        )


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


@functools.lru_cache(maxsize=64)
def _plan_of(data: StructType, json_text: bool = True) -> _Plan | None:
    """:meth:`_Plan.of`, once per schema (a partition of a few hundred rows would otherwise
    spend more on planning than on parsing)."""
    return _Plan.of(data, json_text)


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
    ) -> None:
        self.schema = schema
        self.lenient = lenient
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
        self._plan = _plan_of(data, lines is None)
        # Where rescued keys go in _rescued_data, as the reference parser orders them: by the
        # top-level column they sit under, unknown top-level keys ("*") last.
        self._rescue_order = {f.name: i for i, f in enumerate(data.fields)}
        self._rescue_order["*"] = len(data.fields)
        #: How many rows of the last batch the reference parser took, and why.
        self.reference_rows = 0
        self.reference_reasons: dict[str, int] = {}

    @functools.cached_property
    def reference(self) -> ReferenceParser:
        """The row-by-row parser, for the rows the scans set aside."""
        return ReferenceParser(self.schema, lenient=self.lenient)

    def parse(self, bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]) -> pa.Table:
        """One row per body, in order, on the vectorised path, whatever the batch (compiling the
        kernels as needed)."""
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
            scan = by_row_ranges(
                scan_envelope_fit,
                n,
                self.threads,
                offsets,
                data,
                valid,
                plan.envelope_table.nodes,
                False,
                True,
                apart="events",
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
        aside = _SetAside(n)
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
                data, events, table, schema.field("v").type, self.threads, text_of=_json_texts
            )
            return pa.table([value], schema=schema), every
        root = read_events(data, events, table, pa.struct(list(schema)), self.threads)
        return pa.Table.from_struct_array(root), every

    def _fast_columns(
        self,
        envelopes: pa.Table,
        codes: np.ndarray,
        texts: pa.Array,
        found: FoundKeys,
        aside: _SetAside,
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
        status = np.full(n, _EMPTY, np.int8)
        corrupt = pa.nulls(n, pa.large_string())
        contents = None
        if "choices" in columns:
            choices = columns["choices"]
            lengths = pc.fill_null(pc.list_value_length(choices), 0).to_numpy()
            status[lengths > 0] = _OK
            if plan.content is not None:
                contents = self._content(choices, lengths, aside)
                status = contents.status
                corrupt = contents.corrupt.cast(pa.large_string())
                target = self.target.field("choices").type
                columns["choices"] = _insert_parsed(choices, lengths, contents.parsed, target)
                if not plan.per_choice:
                    # The other choices' values have no column: the reference rescues them.
                    aside.add(Reason.CHOICES, lengths > 1)
                if "parsed" in self.target.names:
                    columns["parsed"] = _first_choices(contents.parsed, contents.first, lengths)
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
            status[tools.made] = _OK
            status[tools.broken == 0] = _CORRUPT_CONTENT
            status[tools.broken == 1] = _TRUNCATED
            made = pa.array(tools.made)
            corrupt = pc.if_else(made, tools.corrupt.cast(pa.large_string()), corrupt)
        elif TOOL_CALLS in self.target.names:
            columns[TOOL_CALLS] = pa.nulls(n, self.target.field(TOOL_CALLS).type)
        invalid = np.flatnonzero(codes == scan_codes.CODE_INVALID)
        status[invalid] = _CORRUPT_ENVELOPE
        status[codes == scan_codes.CODE_NULL] = _NO_STATUS
        columns["_status"] = pa.array(_STATUSES, pa.string()).take(pa.array(status))
        if len(invalid):
            index = np.arange(n)
            index[invalid] = n + np.arange(len(invalid))
            corrupt = pa.concat_arrays([corrupt, shown_as_text(texts.take(pa.array(invalid)))])
            corrupt = corrupt.take(pa.array(index))
        columns["_corrupt_record"] = corrupt
        columns["_rescued_data"] = self._rescued(texts, codes, found, contents, aside.rows())
        if tools is not None and tools.drift:
            columns["_rescued_data"] = self._tools_rescued(columns["_rescued_data"], tools, aside)
        return pa.Table.from_arrays(
            [columns[f.name].cast(f.type) for f in self.target], schema=self.target
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
        scan = by_row_ranges(
            scan_content_fit, len(offsets) - 1, self.threads, offsets, data, valid,
            table.nodes, self.lenient, apart="events",
        )  # fmt: skip
        return scan, None

    def _tools_rescued(self, rescued: pa.Array, tools: ToolColumns, aside: _SetAside) -> pa.Array:
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

    def _content(self, choices: pa.Array, lengths: np.ndarray, aside: _SetAside) -> _Contents:
        """Parse every choice's content: the parsed value per choice, and per row the status
        and ``_corrupt_record`` from its first choice."""
        plan = self._plan
        assert plan is not None and plan.content_table is not None
        assert plan.content is not None and plan.content_read is not None
        per_choice = choices.flatten()
        parents = pc.list_parent_indices(choices).to_numpy()
        fields = _children(per_choice)
        content = _children(fields["message"])["content"]
        offsets, data, valid = string_buffers(content)
        scan: Any  # a ContentScan (its events a list of arrays, one per range)
        if self.fit is not None:
            scan = self.fit.content(offsets, data, valid, plan.content_table, self.lenient)
        else:
            scan = by_row_ranges(
                scan_content_fit, len(content), self.threads, offsets, data, valid,
                plan.content_table.nodes, self.lenient, apart="events",
            )  # fmt: skip
        starts, ends, codes = scan.starts, scan.ends, scan.codes
        fitting = (codes == scan_codes.CODE_FITS) | (codes == scan_codes.CODE_EXTRA)
        values, read = self._read(
            data,
            starts,
            ends,
            fitting,
            events=scan.events,
            table=plan.content_table,
            schema=plan.content_read,
        )
        codes[fitting & ~read] = scan_codes.CODE_MISFIT
        if self.fit is not None:
            aside.of(Reason.READER_RULES).update(parents[self.fit.routed].tolist())
        aside.of(Reason.CONTENT).update(parents[codes == scan_codes.CODE_MISFIT].tolist())
        parsed = finish(
            contiguous(values.column("v")), plan.content, parents, aside.of(Reason.VALUES)
        )

        first = np.cumsum(lengths) - lengths
        has_first = lengths > 0
        head = first[has_first]
        head_codes = codes[head]
        head_length = pc.equal(fields["finish_reason"].take(pa.array(head)), "length")
        truncated = pc.fill_null(head_length, False).to_numpy(zero_copy_only=False)
        status_head = np.full(len(head), _NOT_JSON, np.int8)
        status_head[
            (head_codes == scan_codes.CODE_FITS) | (head_codes == scan_codes.CODE_EXTRA)
        ] = _OK
        broken = head_codes == scan_codes.CODE_INVALID
        status_head[broken] = np.where(truncated[broken], _TRUNCATED, _CORRUPT_CONTENT)
        status = np.full(len(lengths), _EMPTY, np.int8)
        status[has_first] = status_head

        corrupt_index = np.full(len(lengths), -1, np.int64)
        shows_text = (head_codes == scan_codes.CODE_INVALID) | (head_codes == scan_codes.CODE_NONE)
        corrupt_index[np.flatnonzero(has_first)[shows_text]] = head[shows_text]
        return _Contents(
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

    def _rescued(
        self,
        texts: pa.Array,
        codes: np.ndarray,
        found: FoundKeys,
        contents: _Contents | None,
        bad: np.ndarray,
    ) -> pa.Array:
        """``_rescued_data`` for rows that fit but for unknown keys (in the envelope or in a
        choice's content), as the reference parser would rescue them: built in compiled code
        from the spans the scans found, at any depth (:mod:`dspark_json.parse.json.rescue`);
        rows with more keys than the scans record, values whose canonical form needs Python, or
        a path written twice, in Python."""
        n = len(codes)
        needs = codes == scan_codes.CODE_EXTRA
        # Rows to walk in Python (more unknown keys than a scan records): not compiled.
        walk = found.deep.copy()
        content_keys = np.zeros(n, np.bool_)  # rows whose choices' contents record keys
        row_of_choice = first = np.zeros(0, np.int64)
        if contents is not None:
            row_of_choice = np.repeat(np.arange(n), contents.lengths)
            content_keys[row_of_choice[contents.codes == scan_codes.CODE_EXTRA]] = True
            needs |= content_keys
            walk[row_of_choice[contents.found.deep]] = True
            first = contents.first.astype(np.int64)
        needs &= ~bad
        if not needs.any():
            return pa.nulls(n, pa.string())
        entries = self._paths.entries(
            needs & ~walk,
            found,
            None if contents is None else contents.found,
            row_of_choice,
            first,
        )
        none = np.zeros(0, np.uint8)
        offsets, data, valid, fallback, checks = rescue_entries(
            n, entries, found.data, none if contents is None else contents.found.data
        )
        if len(checks):
            fallback[unlike_repr(data, checks)] = True
            valid &= ~fallback
        rescued = pa.LargeStringArray.from_buffers(
            n,
            pa.py_buffer(offsets),
            pa.py_buffer(data),
            pa.py_buffer(np.packbits(valid, bitorder="little")),
        )
        slow = np.flatnonzero((needs & walk) | fallback)
        if len(slow):
            with gc_paused():
                slow_rescued = self._rescued_rows(
                    texts, slow, found, contents, walk=walk, content_keys=content_keys
                )
            index = np.arange(n)
            index[slow] = n + np.arange(len(slow))
            rescued = pa.concat_arrays([rescued, slow_rescued]).take(pa.array(index))
        return rescued.cast(pa.string())

    def _rescued_rows(
        self,
        texts: pa.Array,
        slow: np.ndarray,
        found: FoundKeys,
        contents: _Contents | None,
        *,
        walk: np.ndarray,
        content_keys: np.ndarray,
    ) -> pa.Array:
        """``_rescued_data`` of the rows ``slow``, in Python (:meth:`_rescued_in_python`);
        ``walk``: the rows with more unknown keys than the scans record (walked);
        ``content_keys``: the rows whose choices' contents record unknown keys.

        Rows that repeat the envelope's unknown keys and values of another row byte for byte
        (matched by one shape: ``found.repeats_keys_of``) and rescue nothing else rescue the
        same text: each such group's keys are gathered, ordered and rendered once, from its
        first row, instead of once a row (rendering alone was already cached by
        :meth:`_rescued_in_python`; the gathering was a cost per row: benchmarks/README.md).
        Walked rows, and rows with their contents' keys too, are rendered each on its own."""
        group = np.full(len(slow), -1, np.int64)
        if found.repeats_keys_of is not None:
            alone = (walk | content_keys)[slow]
            group = np.where(alone, -1, found.repeats_keys_of[slow])
        shared = group >= 0
        _, first, inverse = np.unique(group[shared], return_index=True, return_inverse=True)
        own_rows = np.flatnonzero(~shared)
        rendered = np.concatenate([slow[own_rows], slow[shared][first]])
        keys = found.select(rendered)
        choice_keys: dict[int, list[Key]] = {}
        if contents is not None:
            starts, lengths = contents.first, contents.lengths
            ranges = [range(starts[r], starts[r] + lengths[r]) for r in rendered.tolist()]
            choice_keys = contents.found.select(np.array([c for r in ranges for c in r]))
        texts_of = pa.array(
            [
                self._rescued_in_python(
                    texts,
                    row,
                    contents,
                    walk=bool(walk[row]),
                    keys=keys,
                    choice_keys=choice_keys,
                )
                for row in rendered.tolist()
            ],
            pa.large_string(),
        )
        place = np.empty(len(slow), np.int64)  # each slow row's text among those rendered
        place[own_rows] = np.arange(len(own_rows))
        place[shared] = len(own_rows) + inverse.reshape(-1)
        return texts_of.take(pa.array(place))

    def _rescued_in_python(
        self,
        texts: pa.Array,
        row: int,
        contents: _Contents | None,
        *,
        walk: bool,
        keys: dict[int, list[Key]],
        choice_keys: dict[int, list[Key]],
    ) -> str | None:
        """One row's ``_rescued_data`` the slow way: by walking it (``walk``: more unknown keys
        than the scans record), or from the keys the scans found, each value through Python's
        json, in the reference's order (a depth-first walk of the schema: a struct's fields in
        schema order, then its unknown keys in the body's order)."""
        if walk:
            sink = self._walk(texts, row, contents)
            return dump_json(sink) if sink else None
        paths = self._paths
        entries: list[tuple[tuple[int, ...], str, bytes]] = []

        def add(found: list[Key], place: Callable[[tuple[int, ...]], Place]) -> None:
            for seq, (key, value, path) in enumerate(found):
                where, order = place(path)
                # An item past a tuple struct's fields follows its tuple as an element does.
                name = f"[{key}]" if isinstance(key, int) else f".{key}"
                column = where + name if where else name[1:]
                entries.append(((*order, seq), column, value))

        add(keys.get(row, []), paths.envelope_place)
        if contents is not None:
            first = int(contents.first[row])
            for k in range(int(contents.lengths[row])):
                add(choice_keys.get(first + k, []), functools.partial(paths.content_place, k))
        entries.sort(key=lambda e: e[0])
        # Rows often rescue the same keys with the same values (a field the server always
        # sends): each distinct set is rendered once.
        rescued = tuple((path, value) for _, path, value in entries)
        text = paths.rendered.get(rescued)
        if text is None:
            sink = {path: loads(value, checked=True, lenient=True) for path, value in rescued}
            text = dump_json(sink) if sink else ""
            if len(paths.rendered) >= RENDERED:
                paths.rendered.clear()
            paths.rendered[rescued] = text
        return text or None

    @functools.cached_property
    def _paths(self) -> RescuePaths:
        """Column paths for the keys the scans record deeper down (:class:`RescuePaths`)."""
        plan = self._plan
        assert plan is not None
        data = data_fields(self.schema)
        return RescuePaths(
            data, plan.envelope_table, plan.content_table, plan.content, message_type(data)
        )

    def _walk(self, texts: pa.Array, row: int, contents: _Contents | None) -> dict[str, Any]:
        """What the reference parser rescues from a row that fits but for unknown keys."""
        envelope = loads(texts[row].as_py().encode("utf-8"), checked=True)
        choices = envelope.get("choices")
        if contents is not None and isinstance(choices, list) and choices:
            values = []
            for k, choice in enumerate(choices):
                j = int(contents.first[row]) + k
                value = None
                # A content that fits exactly (not CODE_EXTRA) holds nothing to rescue: it need
                # not be read.
                if contents.codes[j] == scan_codes.CODE_EXTRA:
                    span = contents.data[contents.starts[j] : contents.ends[j]].tobytes()
                    value = loads(span, checked=True)
                    choice["message"]["parsed"] = value
                values.append(value)
            if "parsed" in self._rescue_order:  # the schema has a top-level parsed column
                envelope["parsed"] = values[0]
        return self.reference.converter.extras(envelope)


class _SetAside:
    """The rows of a batch set aside for the reference parser, by :class:`Reason`: a row's
    reason is the first one it was set aside for (in the order of the path: the envelope's
    scan, the reader, the values read, the contents)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._rows: dict[Reason, set[int]] = {}

    def of(self, reason: Reason) -> set[int]:
        """The set of rows set aside for ``reason`` (to add to)."""
        return self._rows.setdefault(reason, set())

    def add(self, reason: Reason, rows: np.ndarray) -> None:
        """Set aside the rows where the mask ``rows`` holds."""
        self.of(reason).update(np.flatnonzero(rows).tolist())

    def rows(self) -> np.ndarray:
        """Whether each row is set aside, for any reason."""
        mask = np.zeros(self.n, np.bool_)
        for rows in self._rows.values():
            mask[list(rows)] = True
        return mask

    def counts(self) -> dict[str, int]:
        """Rows per reason, each row counted once, under its first reason."""
        taken: set[int] = set()
        counts: dict[str, int] = {}
        for reason, rows in self._rows.items():
            new = rows - taken
            if new:
                counts[str(reason)] = len(new)
                taken |= new
        return counts


@dataclass(frozen=True)
class _Contents:
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


def _first_choices(per_choice: pa.Array, first: np.ndarray, lengths: np.ndarray) -> pa.Array:
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


def _insert_parsed(
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


def _has_map(dtype: DataType) -> bool:
    if isinstance(dtype, MapType):
        return True
    if isinstance(dtype, StructType):
        return any(_has_map(f.dataType) for f in dtype.fields)
    if isinstance(dtype, ArrayType):
        return _has_map(dtype.elementType)
    return False


def _without_parsed(data: StructType) -> StructType:
    """The envelope as the server sends it: no top-level ``parsed`` or ``tool_calls`` (ours),
    no ``message.parsed``."""
    fields = [f for f in data.fields if f.name not in ("parsed", TOOL_CALLS)]
    message = message_type(data)
    if message is None:
        return StructType(fields)
    choices = data["choices"].dataType
    assert isinstance(choices, ArrayType) and isinstance(choices.elementType, StructType)
    bare_message = StructType([m for m in message.fields if m.name != "parsed"])
    choice = StructType(
        [
            StructField(c.name, bare_message, c.nullable) if c.name == "message" else c
            for c in choices.elementType.fields
        ]
    )
    return StructType(
        [
            StructField(f.name, ArrayType(choice, choices.containsNull), f.nullable)
            if f.name == "choices"
            else f
            for f in fields
        ]
    )


def _guarded(envelope: StructType, *, tools: bool = False) -> StructType:
    """The envelope as the scan checks it: a ``parsed`` key in a body (top level or in a
    message) holding a value, or a top-level ``tool_calls`` key where that is our column, sends
    the row to the reference parser, which decides over it (a type the kernels never fit:
    ``NullType``)."""
    reject = StructField("parsed", NullType())
    rejects = [reject]
    if tools:
        rejects.append(StructField(TOOL_CALLS, NullType()))
    message = message_type(envelope)
    if message is None:
        return StructType([*envelope.fields, *rejects])
    choices = envelope["choices"].dataType
    assert isinstance(choices, ArrayType) and isinstance(choices.elementType, StructType)
    choice = StructType(
        [
            StructField(c.name, StructType([*message.fields, reject])) if c.name == "message" else c
            for c in choices.elementType.fields
        ]
    )
    return StructType(
        [
            StructField("choices", ArrayType(choice)) if f.name == "choices" else f
            for f in envelope.fields
        ]
        + rejects
    )


def _content_reachable(envelope: StructType) -> bool:
    """Whether the envelope type reads what the content pass needs."""
    message = message_type(envelope)
    if message is None or "content" not in message.names:
        return False
    choices = envelope["choices"].dataType
    assert isinstance(choices, ArrayType) and isinstance(choices.elementType, StructType)
    choice = choices.elementType
    return (
        isinstance(message["content"].dataType, StringType)
        and "finish_reason" in choice.names
        and isinstance(choice["finish_reason"].dataType, StringType)
    )
