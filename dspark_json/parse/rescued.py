"""``_rescued_data`` on the vectorised path, for the rows that fit but for unknown keys (in the
envelope or in a choice's content), as the reference parser would rescue them: built in
compiled code from the spans the scans found (:mod:`dspark_json.parse.json.rescue`); rows with
more keys than the scans record, values whose canonical form needs Python, or a path written
twice, in Python (:class:`Rescued`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import StructType

from dspark_json.memory import gc_paused
from dspark_json.parse.content_pass import Contents
from dspark_json.parse.found import (
    RENDERED,
    FoundKeys,
    Key,
    Place,
    RescuePaths,
    unlike_repr,
)
from dspark_json.parse.json import rescue_entries, scan_codes
from dspark_json.parse.plan import Plan
from dspark_json.parse.reference import loads
from dspark_json.response.convert import dump_json
from dspark_json.response.envelope import message_type
from dspark_json.rows import data_fields

__all__ = ["Rescued"]


class Rescued:
    """The ``_rescued_data`` column of a schema's batches on the vectorised path. ``extras``:
    what the reference parser rescues from a whole envelope (its converter's ``extras``), for
    the rows walked in Python."""

    def __init__(
        self,
        schema: StructType,
        plan: Plan,
        extras: Callable[[Any], dict[str, Any]],
        *,
        envelope_keys: bool = True,
    ) -> None:
        self.schema = schema
        self.plan = plan
        self.extras = extras
        #: Whether the envelope's unknown keys are gathered (rescue scope ``all``); else only
        #: the contents' (scope ``parsed``: rows that rescue nothing from their answer are not
        #: visited, and those that do rescue only its keys, but rows walked in Python).
        self.envelope_keys = envelope_keys
        #: Whether the schema has a top-level ``parsed`` column.
        self.top_parsed = "parsed" in data_fields(schema).names

    def column(
        self,
        texts: pa.Array,
        codes: np.ndarray,
        found: FoundKeys,
        contents: Contents | None,
        bad: np.ndarray,
    ) -> pa.Array:
        """``_rescued_data`` for rows that fit but for unknown keys (in the envelope or in a
        choice's content), as the reference parser would rescue them: built in compiled code
        from the spans the scans found, at any depth (:mod:`dspark_json.parse.json.rescue`);
        rows with more keys than the scans record, values whose canonical form needs Python, or
        a path written twice, in Python."""
        n = len(codes)
        if self.envelope_keys:
            needs = codes == scan_codes.CODE_EXTRA
            # Rows to walk in Python (more unknown keys than a scan records): not compiled.
            walk = found.deep.copy()
        else:  # only the answers' keys are asked for: the envelope's are not looked at
            needs = np.zeros(n, np.bool_)
            walk = np.zeros(n, np.bool_)
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
        entries = self.paths.entries(
            needs & ~walk,
            found,
            None if contents is None else contents.found,
            row_of_choice,
            first,
            envelope_keys=self.envelope_keys,
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
        contents: Contents | None,
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
        if found.repeats_keys_of is not None and self.envelope_keys:
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
        contents: Contents | None,
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
        paths = self.paths
        entries: list[tuple[tuple[int, ...], str, bytes]] = []

        def add(found: list[Key], place: Callable[[tuple[int, ...]], Place]) -> None:
            for seq, (key, value, path) in enumerate(found):
                where, order = place(path)
                # An item past a tuple struct's fields follows its tuple as an element does.
                name = f"[{key}]" if isinstance(key, int) else f".{key}"
                column = where + name if where else name[1:]
                entries.append(((*order, seq), column, value))

        if self.envelope_keys:
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
    def paths(self) -> RescuePaths:
        """Column paths for the keys the scans record deeper down (:class:`RescuePaths`)."""
        plan = self.plan
        data = data_fields(self.schema)
        return RescuePaths(
            data, plan.envelope_table, plan.content_table, plan.content, message_type(data)
        )

    def _walk(self, texts: pa.Array, row: int, contents: Contents | None) -> dict[str, Any]:
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
            if self.top_parsed:  # the schema has a top-level parsed column
                envelope["parsed"] = values[0]
        return self.extras(envelope)
