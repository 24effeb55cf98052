"""The output schema: pass-through columns, ``custom_id``, the response envelope typed from vLLM's
documented shape, ``parsed``, and the system columns of the row contract (:mod:`dspark_json.rows`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.rows import ERROR_TYPE
from dspark_json.schema.json_schema import json_schema_to_spark

__all__ = ["envelope_fields", "output_schema"]


def envelope_fields(parsed: DataType | None) -> list[StructField]:
    """vLLM's chat completion envelope, typed from its documented shape, not guessed."""
    tool_call = StructType(
        [
            StructField("id", StringType()),
            StructField("type", StringType()),
            StructField(
                "function",
                StructType(
                    [StructField("name", StringType()), StructField("arguments", StringType())]
                ),
            ),
        ]
    )
    message = [
        StructField("role", StringType()),
        StructField("content", StringType()),
        StructField("reasoning_content", StringType()),
        StructField("tool_calls", ArrayType(tool_call)),
    ]
    if parsed is not None:
        message.append(StructField("parsed", parsed))
    choice = StructType(
        [
            StructField("index", LongType()),
            StructField("message", StructType(message)),
            StructField("finish_reason", StringType()),
            StructField("stop_reason", StringType()),
        ]
    )
    usage = StructType(
        [
            StructField("prompt_tokens", LongType()),
            StructField("completion_tokens", LongType()),
            StructField("total_tokens", LongType()),
        ]
    )
    return [
        StructField("id", StringType()),
        StructField("object", StringType()),
        StructField("created", TimestampType()),
        StructField("model", StringType()),
        StructField("choices", ArrayType(StructType(choice.fields))),
        StructField("usage", usage),
    ]


def output_schema(
    *,
    passthrough: Iterable[StructField] = (),
    response_format: Mapping[str, Any] | None = None,
    parsed: DataType | None = None,
    violations: bool = False,
) -> StructType:
    """Pass-through prompt columns, ``custom_id``, the envelope, ``parsed`` (typed by ``parsed``,
    else from ``response_format``) and the system columns (``_schema_violations`` too when
    ``violations``)."""
    if parsed is None and response_format is not None:
        parsed = json_schema_to_spark(response_format)
    fields = [*passthrough, StructField("custom_id", StringType())]
    fields += envelope_fields(parsed)
    if parsed is not None:
        fields.append(StructField("parsed", parsed))
    fields += [
        StructField("_status", StringType()),
        StructField("_rescued_data", StringType()),
        StructField("_corrupt_record", StringType()),
        StructField("_error", ERROR_TYPE),
    ]
    if violations:
        fields.append(StructField("_schema_violations", ArrayType(StringType())))
    return StructType(fields)
