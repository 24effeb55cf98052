"""What the stages read of an answer, defined once: the first choice's content text, its
``finish_reason``, whether it is a refusal, the usage's token counts and the first choice's tool
calls (:class:`Answer`), at the envelope's paths (:mod:`.envelope`'s ``*_PATH``).

The re-asks (:mod:`dspark_json.reask`) and option ``validateSchema``
(:mod:`dspark_json.schema.validation`) read them from the table the parser already returned
(:func:`read_answers`), not from the bodies: a body is decoded once, by the parser. The
columns are pulled with pyarrow compute, and only the rows a stage asks for become Python.

The rule where the parser's table cannot say: when its schema lacks one of those fields, or has
it with another type than the envelope's (a user ``.schema(...)`` that prunes the envelope,
``schemaHints`` that retype it), the answers of that parse are read from the bodies instead,
by :func:`decode_answer` (the one function outside the parser that decodes an answer body for
these stages). Fields are never added to the parser's schema for them: that would change what
the parser keeps in ``_rescued_data``. Nothing is logged per row.

Both ways read a field as the parser's column holds it (:func:`~.convert.Converter`'s rule):
a string field that holds another JSON value reads as its compact JSON text (a content of
``5`` is ``"5"``, a refusal of ``false`` is ``"false"``, hence a refusal), a token count that
is not an integer within a long's range reads as ``None``; a body is decoded as the parser
decodes an envelope (strict JSON: the server writes it). :func:`first_message`
is the same decoding for the stages that read sample answers before there is a type to parse
them with (schema inference, tool typing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import ArrayType, DataType, StructField, StructType

from dspark_json.response.convert import Converter, arrow_schema
from dspark_json.response.envelope import (
    CALL_ARGUMENTS_PATH,
    CALL_NAME_PATH,
    CALLS_PATH,
    COMPLETION_TOKENS_PATH,
    CONTENT_PATH,
    FINISH_REASON_PATH,
    MESSAGE_PATH,
    PROMPT_TOKENS_PATH,
    REFUSAL_PATH,
    envelope_fields,
)
from dspark_json.rows import load_json

__all__ = ["Answer", "Call", "decode_answer", "first_message", "read_answers"]

#: The finish_reason of an answer the server's content filter stopped: a refusal.
CONTENT_FILTER = "content_filter"


@dataclass(frozen=True)
class Call:
    """One tool call of the first choice: its function's name and arguments' text."""

    name: str | None
    arguments: str | None


@dataclass(frozen=True)
class Answer:
    """What the stages read of one answer (all ``None``/empty where the body holds no
    envelope: not JSON, cut, no answer)."""

    content: str | None = None
    finish_reason: str | None = None
    #: A refusal: the message's ``refusal`` is not empty, or finish_reason ``content_filter``.
    refused: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    calls: tuple[Call, ...] = ()


_ENVELOPE = StructType(envelope_fields(None))
_CONVERTER = Converter(_ENVELOPE)
#: The scalars read, in :func:`_answer`'s order.
_LEAVES = (
    CONTENT_PATH,
    REFUSAL_PATH,
    FINISH_REASON_PATH,
    PROMPT_TOKENS_PATH,
    COMPLETION_TOKENS_PATH,
)


def _answer(leaves: Sequence[Any], calls: tuple[Call, ...]) -> Answer:
    """An answer from its :data:`_LEAVES`' values (as the parser's columns hold them)."""
    content, refusal, finish, prompt, completion = leaves
    return Answer(
        content=content,
        finish_reason=finish,
        refused=bool(refusal) or finish == CONTENT_FILTER,
        prompt_tokens=prompt,
        completion_tokens=completion,
        calls=calls,
    )


def _type_at(path: Sequence[str], dtype: DataType = _ENVELOPE) -> DataType:
    """The envelope's type at ``path`` (a list before the path ends: its element)."""
    for name in path:
        if isinstance(dtype, ArrayType):
            dtype = dtype.elementType
        assert isinstance(dtype, StructType)
        dtype = dtype[name].dataType
    return dtype


# Decoding a body (the fallback, and the sample answers' reader).


def _decoded(body: str | None) -> Any:
    """The body's JSON value, or None where it is not JSON (or nested too deep)."""
    try:
        return load_json(body or "")
    except ValueError:
        return None


def _value_at(value: Any, path: Sequence[str], dtype: DataType = _ENVELOPE) -> Any:
    """The JSON value at ``path`` (a list before the path ends: its first element), or None."""
    for name in path:
        if isinstance(dtype, ArrayType):
            value = value[0] if isinstance(value, list) and value else None
            dtype = dtype.elementType
        assert isinstance(dtype, StructType)
        value = value.get(name) if isinstance(value, dict) else None
        dtype = dtype[name].dataType
    return value


def _leaf(value: Any, path: Sequence[str], dtype: DataType = _ENVELOPE) -> Any:
    """The value at ``path`` as the parser's column of that type holds it."""
    return _CONVERTER.value(_value_at(value, path, dtype), _type_at(path, dtype), "", {})


def first_message(body: str | None) -> Any:
    """The first choice's ``message`` in an answer body (any JSON value: the caller checks it is
    an object), or None where the body is not JSON (or nested too deep) or holds no such path.
    For the stages that read sample answers before there is a type to parse them with."""
    return _value_at(_decoded(body), MESSAGE_PATH)


def decode_answer(body: str | None) -> Answer:
    """What the stages read of one answer, from its body: where the parser's table cannot say
    (:func:`read_answers`)."""
    envelope = _decoded(body)
    call_type = _type_at(CALLS_PATH)
    assert isinstance(call_type, ArrayType)
    found = _value_at(envelope, CALLS_PATH)
    calls = tuple(
        Call(
            name=_leaf(call, CALL_NAME_PATH, call_type.elementType),
            arguments=_leaf(call, CALL_ARGUMENTS_PATH, call_type.elementType),
        )
        for call in (found if isinstance(found, list) else ())
        if isinstance(_value_at(call, CALL_NAME_PATH[:-1], call_type.elementType), dict)
    )
    return _answer([_leaf(envelope, p) for p in _LEAVES], calls)


# Reading the parser's table.


def _first(array: pa.Array) -> tuple[pa.Array, pa.Array]:
    """A list array's values, and where each list's first element is among them (null where
    the list is null or empty)."""
    import pyarrow.compute as pc  # on use: options parse through here (schema.tools) in planning

    some = pc.greater(pc.list_value_length(array), 0)
    return array.values, pc.if_else(some, array.offsets[:-1], None)


def _column_at(
    array: pa.Array, dtype: DataType, path: Sequence[str], rows: pa.Array | None = None
) -> pa.Array | None:
    """The column at ``path`` below ``array`` (of the envelope's type ``dtype``), of ``rows``
    only (default: all), or None where the table's type lacks a step or has the leaf with
    another type than the envelope's. The steps project every row; only the leaf is taken."""
    import pyarrow.compute as pc

    for name in path:
        if isinstance(dtype, ArrayType):
            if not pa.types.is_list(array.type):
                return None
            array, first = _first(array)
            rows, dtype = (first if rows is None else first.take(rows)), dtype.elementType
        if not isinstance(dtype, StructType) or name not in dtype.names:
            return None
        if not pa.types.is_struct(array.type) or array.type.get_field_index(name) < 0:
            return None
        array, dtype = pc.struct_field(array, name), dtype[name].dataType
    if not isinstance(dtype, StructType | ArrayType):  # a leaf: the envelope's type, or none
        expected = arrow_schema(StructType([StructField("v", dtype)])).field(0).type
        if array.type != expected:
            return None
    return array if rows is None else array.take(rows)


def _from_table(table: pa.Table, rows: pa.Array | None) -> list[Answer] | None:
    """The answers in the parser's ``table`` (of ``rows``), or None where its schema cannot
    say."""
    import pyarrow.compute as pc

    tops: dict[str, pa.Array] = {}  # each top-level column in one piece, once

    def column(path: Sequence[str]) -> pa.Array | None:
        top = path[0]
        if top not in table.column_names:
            return None
        if top not in tops:
            tops[top] = table.column(top).combine_chunks()
        return _column_at(tops[top], _ENVELOPE[top].dataType, path[1:], rows)

    leaves = [column(p) for p in _LEAVES]
    calls = column(CALLS_PATH)
    if calls is None or not pa.types.is_list(calls.type) or any(c is None for c in leaves):
        return None
    call_type = _type_at(CALLS_PATH)
    assert isinstance(call_type, ArrayType)
    each = calls.flatten()
    parts = [
        _column_at(each, call_type.elementType, p)
        for p in (CALL_NAME_PATH[:-1], CALL_NAME_PATH, CALL_ARGUMENTS_PATH)
    ]
    if any(p is None for p in parts):
        return None
    function, names, arguments = (p.to_pylist() for p in parts if p is not None)
    counts = pc.list_value_length(calls).to_pylist()
    values = [c.to_pylist() for c in leaves if c is not None]
    out, start = [], 0
    for i, count in enumerate(counts):
        end = start + (count or 0)
        found = tuple(
            Call(name=names[k], arguments=arguments[k])
            for k in range(start, end)
            if function[k] is not None
        )
        out.append(_answer([v[i] for v in values], found))
        start = end
    return out


def read_answers(
    table: pa.Table, bodies: pa.Array | pa.ChunkedArray, rows: Sequence[int] | None = None
) -> list[Answer]:
    """What the stages read of the answers ``bodies`` that the parser turned into ``table``
    (its rows are theirs, in order), from the table's columns; where its schema lacks one of
    them or retypes it, from the bodies (:func:`decode_answer`). ``rows``: only those rows, in
    that order (default: all)."""
    index = None if rows is None else pa.array(rows, pa.int64())
    found = _from_table(table, index)
    if found is not None:
        return found
    some = bodies if index is None else bodies.take(index)
    return [decode_answer(body) for body in some.to_pylist()]
