"""Where a response schema holds the content: the walk from ``choices`` to ``message`` (and its
``parsed``), and the typed tool calls (column ``tool_calls``), done here once for every parser."""

from __future__ import annotations

from pyspark.sql.types import ArrayType, DataType, StructType

__all__ = ["TOOL_CALLS", "content_type", "message_type", "tool_types"]

#: The column of the typed tool calls: one field per function name, each the list of that
#: function's calls in the first choice (``struct<id, arguments>``;
#: :mod:`dspark_json.schema.tools`).
TOOL_CALLS = "tool_calls"


def message_type(schema: StructType) -> StructType | None:
    """The type of ``choices[].message``, or None where ``schema`` has no such struct."""
    if "choices" not in schema.names:
        return None
    choices = schema["choices"].dataType
    if not (isinstance(choices, ArrayType) and isinstance(choices.elementType, StructType)):
        return None
    choice = choices.elementType
    if "message" not in choice.names or not isinstance(choice["message"].dataType, StructType):
        return None
    return choice["message"].dataType


def content_type(schema: StructType) -> DataType | None:
    """The type of the parsed content, from ``parsed`` or ``choices[].message.parsed``."""
    if "parsed" in schema.names:
        return schema["parsed"].dataType
    message = message_type(schema)
    if message is not None and "parsed" in message.names:
        return message["parsed"].dataType
    return None


def tool_types(schema: StructType) -> dict[str, DataType] | None:
    """Function name -> the type of its calls' arguments, from column ``tool_calls`` (None
    where ``schema`` has no such column, or it is not a struct of lists of calls)."""
    if TOOL_CALLS not in schema.names:
        return None
    dtype = schema[TOOL_CALLS].dataType
    if not isinstance(dtype, StructType):
        return None
    out: dict[str, DataType] = {}
    for f in dtype.fields:
        call = f.dataType.elementType if isinstance(f.dataType, ArrayType) else None
        if not isinstance(call, StructType) or "arguments" not in call.names:
            return None
        out[f.name] = call["arguments"].dataType
    return out
