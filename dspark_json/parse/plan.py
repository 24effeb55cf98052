"""What the vectorised path reads for a schema (:class:`Plan`): the envelope as the server sends
it (no ``parsed``, no ``tool_calls``) and the type the scan checks it against, the content
type, their compiled type tables and Arrow read schemas, each tool function's arguments; or
None where the schema is beyond the vectorised reader (the reference parser then takes every
row). Planned once per schema (:func:`plan_of`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    DataType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
)

from dspark_json.parse.calls import ToolPlan, tools_reachable
from dspark_json.parse.finish import read_type
from dspark_json.parse.json import TypeTable, compile_type
from dspark_json.response.convert import arrow_schema
from dspark_json.response.envelope import TOOL_CALLS, content_type, message_type, tool_types

__all__ = ["Plan", "plan_of"]

#: ``created`` and other envelope timestamps: unix seconds from year 1 to 9999.
_SECONDS = (-62135596800, 253402300799)


@dataclass(frozen=True)
class Plan:
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
    def of(cls, data: StructType, json_text: bool = True) -> Plan | None:
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


@functools.lru_cache(maxsize=64)
def plan_of(data: StructType, json_text: bool = True) -> Plan | None:
    """:meth:`Plan.of`, once per schema (a partition of a few hundred rows would otherwise
    spend more on planning than on parsing)."""
    return Plan.of(data, json_text)


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
