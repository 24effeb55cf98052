"""Where a response schema holds the content: the walk from ``choices`` to ``message`` (and its
``parsed``), done here once for every parser."""

from __future__ import annotations

from pyspark.sql.types import ArrayType, DataType, StructType

__all__ = ["content_type", "message_type"]


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
