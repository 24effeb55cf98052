"""The unknown keys the scans found, as Python reads them for ``_rescued_data``.

The vectorised path writes most of ``_rescued_data`` in compiled code (:mod:`.json.rescue`); the
rows it cannot (keys deeper than the top level, values whose canonical form needs Python, more
keys than a scan records) are rescued in Python from what the scans recorded:

- :class:`FoundKeys`: a scan's unknown keys, by row (top-level spans, nested spans with their
  path of type nodes and element indexes, and the groups of rows that repeat one another's);
- :class:`RescuePaths` / :class:`NodePaths`: the column path of a nested key and its sort key,
  so that keys come out in the reference parser's order;
- :func:`unlike_repr`: the 16-17-digit numbers that Python's ``repr`` writes otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pyspark.sql.types import ArrayType, DataType, StructType

from dspark_json.parse.json import (
    NESTED_STRIDE,
    T_STRUCT,
    ContentScan,
    EnvelopeScan,
    KeySpans,
    TypeTable,
)

__all__ = ["LAST", "RENDERED", "FoundKeys", "Key", "NodePaths", "RescuePaths", "unlike_repr"]

#: Sorts a struct's own unknown keys after its fields (any field position or index is less).
LAST = 2**62
#: An unknown key a scan recorded: the key, its value's raw JSON, its path (see FoundKeys).
Key = tuple[str, bytes, tuple[int, ...]]
#: Distinct sets of rescued keys remembered per parser, rendered as ``_rescued_data``.
RENDERED = 4096


class RescuePaths:
    """What the CPU parser's rescue in Python needs of the schema, worked out once: the paths
    of the envelope's and the content's nodes, where each choice's content goes (``message``:
    the type of a choice's message in ``data``), and the sets of rescued keys already
    rendered."""

    def __init__(
        self,
        data: StructType,
        envelope: TypeTable,
        content_table: TypeTable | None,
        content: DataType | None,
        message: StructType | None,
    ) -> None:
        self.data = data
        self.message = message
        self.envelope = NodePaths(envelope, data)
        self.content = (
            NodePaths(content_table, content)
            if content_table is not None and content is not None
            else None
        )
        self.rendered: dict[tuple[tuple[str, bytes], ...], str] = {}
        self._choices: dict[int, tuple[str, tuple[int, ...]]] = {}

    def choice(self, k: int) -> tuple[str, tuple[int, ...]]:
        """Where choice ``k``'s content keys go: their path prefix and sort key (the first
        choice's under ``parsed`` where the schema has that column, as the reference does)."""
        known = self._choices.get(k)
        if known is None:
            data = self.data
            if k == 0 and "parsed" in data.names:
                known = ("parsed.", (data.names.index("parsed"),))
            else:
                message = self.message
                choices = data["choices"].dataType
                assert isinstance(choices, ArrayType)
                choice = choices.elementType
                assert message is not None and isinstance(choice, StructType)
                steps = (
                    data.names.index("choices"),
                    k,
                    choice.names.index("message"),
                    message.names.index("parsed"),
                )
                known = (f"choices[{k}].message.parsed.", steps)
            self._choices[k] = known
        return known


class NodePaths:
    """Column paths of nested unknown keys, from the paths the scans record (per level: a type
    node of ``table`` entered through a field, or ``-(index + 1)`` of an array element), with
    each step's schema position in ``dtype`` (the type of ``table``'s node 0), for sorting."""

    def __init__(self, table: TypeTable, dtype: DataType) -> None:
        self.dtype = dtype
        self.known: dict[tuple[int, ...], tuple[str, tuple[int, ...]]] = {}
        self.names: dict[int, str] = {}
        nodes = table.nodes
        for node in np.flatnonzero(nodes.kind == T_STRUCT).tolist():
            start = int(nodes.first[node])
            for j in range(start, start + int(nodes.field_count[node])):
                if nodes.key_end[j] < nodes.key_start[j]:  # never matched (compile_type)
                    continue
                self.names[int(nodes.field_node[j])] = table.names[j]

    def path(self, steps: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
        """The column path of the object the steps lead to, and its sort key."""
        known = self.known.get(steps)
        if known is None:
            known = self.known[steps] = self._path(steps)
        return known

    def _path(self, steps: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
        text, sort, dtype = "", [], self.dtype
        for step in steps:
            if step < 0:
                assert isinstance(dtype, ArrayType)
                text += f"[{-step - 1}]"
                sort.append(-step - 1)
                dtype = dtype.elementType
            else:
                assert isinstance(dtype, StructType)
                name = self.names[step]
                text += f".{name}" if text else name
                sort.append(dtype.names.index(name))
                dtype = dtype[name].dataType
        return text, tuple(sort)


@dataclass(frozen=True)
class FoundKeys:
    """Unknown keys a scan found at the top level of documents in ``data``: ``rows[i]`` holds a
    key at ``data[s[0]:s[1]]`` with the value at ``data[s[2]:s[3]]``, ``s = spans[4*i:4*i+4]``;
    ``deep[row]`` where a row's unknown keys need a walk in Python instead."""

    data: np.ndarray
    deep: np.ndarray
    rows: np.ndarray
    spans: np.ndarray
    #: The unknown keys deeper down, by row: ``NESTED_STRIDE`` entries each (see
    #: :func:`~dspark_json.parse.json.conform.check_row`).
    nested_rows: np.ndarray
    nested: np.ndarray
    #: Per row, a group id: the row whose unknown keys and values it repeats byte for byte
    #: (-1: none, or not known): :attr:`~dspark_json.parse.json.scans.EnvelopeScan.repeats_keys_of`,
    #: for the envelope's keys.
    repeats_keys_of: np.ndarray | None = None

    @classmethod
    def of(cls, data: np.ndarray, scan: EnvelopeScan | ContentScan) -> FoundKeys:
        """The unknown keys a scan of the documents in ``data`` found."""
        repeats = scan.repeats_keys_of if isinstance(scan, EnvelopeScan) else None
        return cls(data, scan.deep, scan.rows, scan.spans, scan.nested_rows, scan.nested, repeats)

    def by_owner(self, owners: int) -> KeySpans:
        """The top-level keys of owners ``0..owners`` (the rows, or the choices, scanned)."""
        index = np.arange(owners)
        start = np.searchsorted(self.rows, index, "left")
        end = np.searchsorted(self.rows, index, "right")
        return KeySpans(self.data, start, end, self.spans)

    def select(self, rows: np.ndarray) -> dict[int, list[Key]]:
        """The unknown keys recorded for ``rows``, by row, in the body's order: the key, its
        value's raw JSON, and its path (empty at the top level; else per level above the key's
        object, a type node entered through a field or ``-(index + 1)`` of an element)."""
        view = memoryview(self.data.data)
        out: dict[int, list[Key]] = {}
        top = np.isin(self.rows, rows)
        for row, (k0, k1, v0, v1) in zip(
            self.rows[top].tolist(), self.spans.reshape(-1, 4)[top].tolist(), strict=True
        ):
            out.setdefault(row, []).append((str(view[k0:k1], "utf-8"), bytes(view[v0:v1]), ()))
        deeper = np.isin(self.nested_rows, rows)
        entries = self.nested.reshape(-1, NESTED_STRIDE)[deeper].tolist()
        for row, e in zip(self.nested_rows[deeper].tolist(), entries, strict=True):
            key = (
                str(view[e[0] : e[1]], "utf-8"),
                bytes(view[e[2] : e[3]]),
                tuple(e[5 : 5 + e[4]]),
            )
            out.setdefault(row, []).append(key)
        return out


def unlike_repr(data: np.ndarray, checks: np.ndarray) -> np.ndarray:
    """The rows of the numbers noted in ``checks`` (row, start, end) that Python's ``repr``
    would write otherwise (one float() and repr() per number). Made without a container per
    number: thousands of small lists set off the cyclic GC's walk of the whole heap (strings
    and floats are not tracked by the GC)."""
    triples = checks.reshape(-1, 3)
    raw = data.tobytes()
    texts = [
        raw[s:e].decode("ascii")
        for s, e in zip(triples[:, 1].tolist(), triples[:, 2].tolist(), strict=True)
    ]
    differs = np.fromiter((repr(float(x)) != x for x in texts), np.bool_, len(texts))
    return np.unique(triples[differs, 0])
