"""The output schema: pass-through columns, ``custom_id``, the response envelope
(:func:`dspark_json.response.envelope.envelope_fields`), ``parsed``, and the system columns of the
row contract (:mod:`dspark_json.rows`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from pyspark.sql.types import DataType, StringType, StructField, StructType

from dspark_json.response.envelope import (
    ENVELOPE_COLUMNS,
    TOOL_CALLS,
    envelope_fields,
    is_documented_extra,
)
from dspark_json.rows import OPTIONAL_COLUMNS, PARSER_COLUMNS, SYSTEM_FIELDS
from dspark_json.schema.json_schema import json_schema_to_spark
from dspark_json.schema.tools import tool_calls_type, tool_parameters

__all__ = [
    "RESPONSE_COLUMNS",
    "drift_keys",
    "output_schema",
    "response_fields",
    "tool_arguments",
]


def drift_keys(rescued: str | None) -> list[str]:
    """The keys of one ``_rescued_data`` object that are drift, not documented extras."""
    if not rescued:
        return []
    return [key for key in json.loads(rescued) if not is_documented_extra(key)]


def output_schema(
    *,
    passthrough: Iterable[StructField] = (),
    response_format: Mapping[str, Any] | None = None,
    parsed: DataType | None = None,
    tools: Mapping[str, DataType] | None = None,
    added: Collection[str] = (),
) -> StructType:
    """The output schema, assembled here only: pass-through prompt columns, ``custom_id``, the
    envelope, ``parsed`` (typed by ``parsed``, else from ``response_format``), ``tool_calls``
    (``tools``: function name -> the type of its arguments, :func:`tool_arguments`), the system
    columns every output has, then the optional ones named in ``added`` (their options are on:
    :func:`dspark_json.load.added_columns`), in the registry's order
    (:data:`dspark_json.rows.COLUMNS`)."""
    unknown = set(added).difference(c.name for c in OPTIONAL_COLUMNS)
    if unknown:
        raise ValueError(f"not optional system columns: {sorted(unknown)}")
    if parsed is None and response_format is not None:
        parsed = json_schema_to_spark(response_format)
    fields = [*passthrough, StructField("custom_id", StringType())]
    fields += envelope_fields(parsed)
    if parsed is not None:
        fields.append(StructField("parsed", parsed))
    if tools:
        fields.append(StructField(TOOL_CALLS, tool_calls_type(tools)))
    fields += SYSTEM_FIELDS
    fields += [c.field for c in OPTIONAL_COLUMNS if c.name in added]
    return StructType(fields)


def tool_arguments(
    tools: Sequence[Mapping[str, Any]], inferred: Mapping[str, DataType] | None = None
) -> dict[str, DataType]:
    """Function name -> the type of its arguments: from its ``parameters`` JSON Schema (as
    ``responseFormat`` types ``parsed``), else ``inferred``'s, else string (their JSON text)."""
    out: dict[str, DataType] = {}
    for name, parameters in tool_parameters(tools).items():
        if parameters is not None:
            out[name] = json_schema_to_spark(parameters)
        else:
            out[name] = (inferred or {}).get(name) or StringType()
    return out


#: The columns the parser fills from a response body: the envelope, ``parsed``, ``tool_calls`` and
#: :data:`~dspark_json.rows.PARSER_COLUMNS`.
RESPONSE_COLUMNS = frozenset({*ENVELOPE_COLUMNS, "parsed", TOOL_CALLS, *PARSER_COLUMNS})


def response_fields(schema: StructType) -> StructType:
    """The columns of ``schema`` that the parser fills (:data:`RESPONSE_COLUMNS`), in order."""
    return StructType([f for f in schema.fields if f.name in RESPONSE_COLUMNS])
