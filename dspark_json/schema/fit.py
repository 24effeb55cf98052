"""Answers whose JSON does not fit the type of ``parsed``, found from the parser's outputs.

The parser keeps a value that does not fit its field in ``_rescued_data`` under the field's path
(``parsed.score``, ``parsed.items[1].qty``), beside the fields the type does not know (drift:
``parsed.extra``). A rescued key whose path names a field of ``parsed`` is a *misfit*: its row is
``schema_mismatch`` (:attr:`dspark_json.rows.Status.SCHEMA_MISMATCH`), never ``ok`` with a null
in silence, and one WARN per query (in each Python process) names the field, its type and a value
the answers hold (:func:`warn_once`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableSequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from dspark_json.rows import Status, load_json
from dspark_json.schema.inference import infer_type

__all__ = ["PARSED", "Misfit", "field_type", "find_misfits", "mark_misfits", "warn_once"]

logger = logging.getLogger("dspark_json")

#: The column whose misfits are looked for, as its rescued keys start.
PARSED = "parsed"
#: The longest value quoted in a message, in characters of its JSON text.
_QUOTED = 60
#: The most fields one WARN names.
_NAMED = 5

#: The queries (and entry points) whose misfits this process has logged.
_warned: set[Hashable] = set()


@dataclass(frozen=True)
class Misfit:
    """A value of an answer that does not fit its field of ``parsed``."""

    path: str  # the rescued key: parsed.score, parsed.items[1].qty
    type: DataType  # the field's type there
    value: Any  # the value as the answer holds it

    @property
    def field(self) -> str:
        """The field's path without array positions (``parsed.items[].qty``)."""
        out, depth = [], 0
        for char in self.path:
            depth += char == "["
            if depth == 0 or char in "[]":
                out.append(char)
            depth -= char == "]"
        return "".join(out)

    def describe(self) -> str:
        """``parsed.score is double, the answer holds "high"``."""
        text = json.dumps(self.value, ensure_ascii=False)
        if len(text) > _QUOTED:
            text = text[:_QUOTED] + "..."
        return f"{self.path} is {self.type.simpleString()}, the answer holds {text}"


def field_type(path: str, parsed: DataType) -> DataType | None:
    """The type of ``parsed`` at the rescued key ``path`` (``parsed.items[1].qty``); ``None``
    where the path leaves the type (a field it does not know: drift, not a misfit)."""
    if path != PARSED and not path.startswith((PARSED + ".", PARSED + "[")):
        return None
    rest, dtype = path[len(PARSED) :], parsed
    while rest:
        if rest[0] == "[":
            end = rest.find("]")
            if end < 0 or not isinstance(dtype, ArrayType) or not rest[1:end].isdigit():
                return None
            dtype, rest = dtype.elementType, rest[end + 1 :]
        elif rest[0] == "." and isinstance(dtype, StructType):
            rest = rest[1:]
            names = [n for n in dtype.names if rest == n or rest.startswith((n + ".", n + "["))]
            if not names:
                return None
            name = max(names, key=len)  # a field named with a dot: the longest that matches
            dtype, rest = dtype[name].dataType, rest[len(name) :]
        elif rest[0] == "." and isinstance(dtype, MapType):
            ends = [i for i in (rest.find(".", 1), rest.find("[", 1)) if i > 0]
            dtype, rest = dtype.valueType, rest[min(ends) :] if ends else ""
        else:
            return None
    return dtype


def find_misfits(
    rescued: pa.Array | pa.ChunkedArray, parsed: DataType, keys: Iterable[str] | None = None
) -> dict[int, Misfit]:
    """Row -> its first misfit, from the ``_rescued_data`` column ``rescued`` of answers parsed
    into ``parsed``'s type (rows without one left out).

    ``keys``: the distinct keys of ``rescued`` where the caller has them (the parse stage's
    compiled scan, :func:`dspark_json.parse.new_fields`): where none is a misfit (drift alone),
    no text is read; else only the texts holding a misfit's key are read as JSON. (Reading every
    row that holds ``"parsed`` cost more than parsing it where every answer drifts, 20,000 rows
    on a loaded machine; with the keys, 0.5 % of the parse.)"""
    if rescued.null_count == len(rescued):
        return {}
    if keys is None:
        pattern = re.escape(f'"{PARSED}')
    else:
        misfit_keys = [key for key in keys if field_type(key, parsed) is not None]
        if not misfit_keys:
            return {}
        pattern = "|".join(re.escape(key) for key in misfit_keys)  # a superset: checked below
    holds = pc.fill_null(pc.match_substring_regex(rescued, pattern), False)
    found: dict[int, Misfit] = {}
    for row in np.flatnonzero(holds.to_numpy(zero_copy_only=False)).tolist():
        try:
            rescued_here = load_json(rescued[row].as_py())
        except ValueError:  # none the parser writes
            continue
        if not isinstance(rescued_here, dict):
            continue
        for key, value in rescued_here.items():
            dtype = field_type(key, parsed)
            if dtype is not None:
                found[row] = Misfit(key, dtype, value)
                break
    return found


def mark_misfits(statuses: MutableSequence[str], found: Mapping[int, Misfit]) -> dict[int, Misfit]:
    """``ok`` rows of ``found`` become ``schema_mismatch`` (a row of another status keeps it);
    returns the rows marked."""
    marked = {row: misfit for row, misfit in found.items() if statuses[row] == Status.OK}
    for row in marked:
        statuses[row] = Status.SCHEMA_MISMATCH
    return marked


def _fitting(value: object) -> str:
    """A Spark type that holds ``value``: the inferred one, and for a whole number past BIGINT
    (which inference calls bigint) a decimal where 38 digits hold it, else double."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return "decimal(38,0)" if len(str(abs(value))) <= 38 else "double"
    return infer_type([value]).simpleString()


def warn_once(
    key: Hashable,
    marked: Mapping[int, Misfit],
    describe: Callable[[int], str],
    *,
    rows: int,
) -> None:
    """One WARN per ``key`` (a query) in this process where rows were marked: the fields that
    did not fit, each with its type, a value the answers hold and a type that fits it."""
    if not marked or key in _warned:
        return
    _warned.add(key)
    first: dict[str, tuple[int, Misfit]] = {}
    for row, misfit in sorted(marked.items()):
        first.setdefault(misfit.field, (row, misfit))
    named = [
        f"{m.describe()} (in {describe(row)}; {_fitting(m.value)} fits it)"
        for row, m in list(first.values())[:_NAMED]
    ]
    more = f" and {len(first) - _NAMED} more field(s)" if len(first) > _NAMED else ""
    logger.warning(
        "Answers do not fit the type of `parsed`: %s%s. %d of %d row(s) here are _status = "
        "'schema_mismatch': the field is null in `parsed`, the value kept in _rescued_data "
        "under its path. Give the field a type that fits (in .schema(...), option "
        "responseFormat or schemaHints).",
        "; ".join(named),
        more,
        len(marked),
        rows,
    )
