"""The unknown keys the scans found, as Python reads them for ``_rescued_data``.

The vectorised path writes most of ``_rescued_data`` in compiled code (:mod:`.json.rescue`); the
rows it cannot (values whose canonical form needs Python, a path written twice, more keys
than a scan records) are rescued in Python from what the scans recorded:

- :class:`FoundKeys`: a scan's unknown keys, by row (top-level spans, nested spans with their
  path of type nodes and element indexes, and the groups of rows that repeat one another's);
- :class:`RescuePaths` / :class:`NodePaths`: the column path of a nested key's object (its
  *place*) and its sort key, so that keys come out in the reference parser's order;
  :meth:`RescuePaths.entries` lays out a batch's keys for the compiled rescue
  (:class:`~dspark_json.parse.json.RescueEntries`);
- :func:`unlike_repr`: the 16-17-digit numbers that Python's ``repr`` writes otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pyspark.sql.types import ArrayType, DataType, StructType

from dspark_json.parse.json import (
    NESTED_PATH,
    NESTED_STRIDE,
    T_STRUCT,
    ContentScan,
    EnvelopeScan,
    RescueEntries,
    TypeTable,
)

__all__ = [
    "LAST",
    "RENDERED",
    "FoundKeys",
    "Key",
    "NodePaths",
    "Place",
    "RescuePaths",
    "joined",
    "unlike_repr",
]

#: Sorts a struct's own unknown keys after its fields (any field position or index is less).
LAST = 2**62
#: An unknown key a scan recorded: the key (or, for an item past a tuple struct's fields, the
#: item's position), its value's raw JSON, its path (see FoundKeys).
Key = tuple[str | int, bytes, tuple[int, ...]]
#: Distinct sets of rescued keys remembered per parser, rendered as ``_rescued_data``.
RENDERED = 4096
#: A place: where a rescued key's object sits, its column path (empty: the top level) and the
#: sort key of its keys (they follow the object's fields: ``LAST``).
Place = tuple[str, tuple[int, ...]]


def joined(prefix: str, path: str) -> str:
    """A column path under ``prefix`` (``""``, ``"parsed."``, ``"choices[1].message.parsed."``)
    as the reference parser spells it: an element index follows its column without a dot
    (``parsed[0].subtitle``, as ``choices[0].message``), a field after one."""
    return prefix[:-1] + path if prefix and path.startswith("[") else prefix + path


class RescuePaths:
    """What the CPU parser's rescue needs of the schema (the compiled rescue's entry table,
    :meth:`entries`, and the rescue in Python), worked out once: the paths
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

    def envelope_place(self, steps: tuple[int, ...]) -> Place:
        """The place of an envelope key whose object the scan's path ``steps`` leads to."""
        text, sort = self.envelope.path(steps) if steps else ("", ())
        return text, (*sort, LAST)

    def content_place(self, k: int, steps: tuple[int, ...]) -> Place:
        """The place of a key in choice ``k``'s content, its object at the path ``steps``."""
        prefix, head = self.choice(k)
        assert self.content is not None
        text, sort = self.content.path(steps) if steps else ("", ())
        where = joined(prefix, text) if steps else prefix[:-1]
        return where, (*head, *sort, LAST)

    def entries(
        self,
        rows: np.ndarray,
        envelope: FoundKeys,
        content: FoundKeys | None,
        row_of_choice: np.ndarray,
        first: np.ndarray,
        *,
        envelope_keys: bool = True,
    ) -> RescueEntries:
        """The unknown keys of the rows where ``rows`` (the envelope's, unless not
        ``envelope_keys``, and the contents' of their choices: choice ``c`` is of row
        ``row_of_choice[c]``, its ``c - first[row]``-th) laid out for
        :func:`~dspark_json.parse.json.rescue_entries`, in the reference's order: by row, by
        place, and in the body's order within one object."""
        places: list[Place] = []
        ids: dict[tuple[int, ...], int] = {}

        def place_of(key: tuple[int, ...], make: Place) -> int:
            if key not in ids:
                ids[key] = len(places)
                places.append(make)
            return ids[key]

        parts: list[tuple[np.ndarray, int, np.ndarray, np.ndarray]] = []
        top_rows = envelope.rows
        keep = rows[top_rows] & envelope_keys
        at = place_of((0,), self.envelope_place(()))
        spans = envelope.spans.reshape(-1, 4)[keep]
        parts.append((top_rows[keep], 0, spans, np.full(len(spans), at, np.int64)))
        keep = rows[envelope.nested_rows] & envelope_keys
        spans, paths, inverse = _nested(envelope, keep)
        found = [place_of((1, *steps), self.envelope_place(steps)) for steps in paths]
        parts.append((envelope.nested_rows[keep], 0, spans, _ids(found, inverse)))
        if content is not None:
            choice_rows = row_of_choice[content.rows]
            keep = rows[choice_rows]
            ks = (content.rows - first[choice_rows])[keep]
            distinct, inverse = np.unique(ks, return_inverse=True)
            found = [place_of((2, k), self.content_place(k, ())) for k in distinct.tolist()]
            spans = content.spans.reshape(-1, 4)[keep]
            parts.append((choice_rows[keep], 1, spans, _ids(found, inverse.reshape(-1))))
            nested_rows = row_of_choice[content.nested_rows]
            keep = rows[nested_rows]
            ks = content.nested_rows - first[nested_rows]
            spans, paths, inverse = _nested(content, keep, ks)
            found = [place_of((3, *path), self.content_place(path[0], path[1:])) for path in paths]
            parts.append((nested_rows[keep], 1, spans, _ids(found, inverse)))
        row_of = np.concatenate([p[0] for p in parts]).astype(np.int64)
        sources = np.concatenate([np.full(len(p[0]), p[1], np.int8) for p in parts])
        all_spans = np.concatenate([p[2].reshape(-1, 4) for p in parts]).astype(np.int64)
        at_of = np.concatenate([p[3] for p in parts]).astype(np.int64)
        order = sorted(range(len(places)), key=lambda p: (places[p][1], p))
        rank = np.empty(len(places), np.int64)
        rank[order] = np.arange(len(places))
        sort = np.lexsort((np.arange(len(row_of)), rank[at_of], row_of))
        texts = [where.encode("utf-8") for where, _ in places]
        where_at = np.zeros(len(texts) + 1, np.int64)
        where_at[1:] = np.cumsum([len(t) for t in texts])
        return RescueEntries(
            np.ascontiguousarray(row_of[sort]),
            np.ascontiguousarray(sources[sort]),
            np.ascontiguousarray(all_spans[sort].reshape(-1)),
            np.ascontiguousarray(at_of[sort]),
            np.frombuffer(b"".join(texts) or b"\0", np.uint8),
            where_at,
        )


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
            if step < 0:  # an array's element, or a tuple struct's item (a JSON array too)
                text += f"[{-step - 1}]"
                sort.append(-step - 1)
                if isinstance(dtype, StructType):
                    dtype = dtype.fields[-step - 1].dataType
                else:
                    assert isinstance(dtype, ArrayType)
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
    """Unknown keys a scan found in documents in ``data``: at the top level, ``rows[i]`` holds a
    key at ``data[s[0]:s[1]]`` with the value at ``data[s[2]:s[3]]``, ``s = spans[4*i:4*i+4]``;
    deeper down, ``nested_rows``/``nested``; ``deep[row]`` where a row's unknown keys need a walk
    in Python instead."""

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

    def select(self, rows: np.ndarray) -> dict[int, list[Key]]:
        """The unknown keys recorded for ``rows``, by row, in the body's order: the key (an
        item's position for an item past a tuple struct's fields), its value's raw JSON, and its
        path (empty at the top level; else per level above the key's
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
            # A key start below 0: an item past a tuple struct's fields, ``-(position + 1)``.
            name = str(view[e[0] : e[1]], "utf-8") if e[0] >= 0 else -e[0] - 1
            out.setdefault(row, []).append((name, bytes(view[e[2] : e[3]]), tuple(e[5 : 5 + e[4]])))
        return out


def _ids(ids: list[int], inverse: np.ndarray) -> np.ndarray:
    """Each key's place id, from the ids of the distinct paths and each key's path among them."""
    return np.array(ids, np.int64)[inverse] if len(inverse) else np.zeros(0, np.int64)


def _distinct_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, axis=0, return_inverse=True)``, through one int64 per row where the
    columns' ranges fit in one (the usual case: a few small node numbers and indexes), which
    sorts many times faster than rows of a 2-D array."""
    low = key.min(axis=0)
    spans = key.max(axis=0) - low + 1
    if float(np.prod(spans.astype(np.float64))) >= 2.0**62:
        return np.unique(key, axis=0, return_inverse=True)
    weights = np.ones(key.shape[1], np.int64)
    weights[:-1] = np.cumprod(spans[::-1])[::-1][1:]
    codes = (key - low) @ weights
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    return key[first], inverse.reshape(-1)


def _nested(
    found: FoundKeys, keep: np.ndarray, choice: np.ndarray | None = None
) -> tuple[np.ndarray, list[tuple[int, ...]], np.ndarray]:
    """The nested keys of ``found`` where ``keep``: their spans (four entries each), their
    distinct paths (each ``(k, *steps)`` where ``choice`` gives each key's choice position
    ``k`` among its row's, else ``steps``), and the index of each key's path among those."""
    entries = found.nested.reshape(-1, NESTED_STRIDE)[keep]
    length = entries[:, 4]
    steps = np.where(np.arange(NESTED_PATH) < length[:, None], entries[:, 5:], 0)
    columns = [length[:, None], steps]
    if choice is not None:
        columns.insert(0, choice[keep][:, None])
    key = np.concatenate(columns, axis=1)
    if not len(key):
        return entries[:, :4], [], np.zeros(0, np.int64)
    distinct, inverse = _distinct_rows(key)
    lead = 0 if choice is None else 1
    paths = [
        (*entry[:lead], *entry[lead + 1 : lead + 1 + entry[lead]]) for entry in distinct.tolist()
    ]
    return entries[:, :4], paths, inverse.reshape(-1)


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
