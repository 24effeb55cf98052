"""The output schema: the response envelope, the typed content, pass-through and status columns.

Resolved once on the driver. In this version the content type comes from the JSON Schema the model
is asked to follow (``responseFormat``); a user schema given with ``.schema(...)`` always wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.errors import SchemaError

__all__ = [
    "ENVELOPE_COLUMNS",
    "ERROR_TYPE",
    "MALFORMED",
    "RESPONSE_COLUMNS",
    "STATUS_VALUES",
    "SYSTEM_COLUMNS",
    "envelope_fields",
    "json_schema_to_spark",
    "output_schema",
]

#: One word per row saying what happened to it (see DESIGN.md, "Row semantics").
STATUS_VALUES = (
    "ok",
    "http_error",
    "invalid_prompt",
    "corrupt_envelope",
    "corrupt_content",
    "not_json",
    "truncated",
    "empty",
)

ERROR_TYPE = StructType(
    [
        StructField("status", IntegerType()),
        StructField("type", StringType()),
        StructField("message", StringType()),
        StructField("attempts", IntegerType()),
    ]
)

ENVELOPE_COLUMNS = ("id", "object", "created", "model", "choices", "usage")
SYSTEM_COLUMNS = ("_status", "_rescued_data", "_corrupt_record", "_error")
#: The columns the parser fills from a response body.
RESPONSE_COLUMNS = frozenset(
    {*ENVELOPE_COLUMNS, "parsed", "_status", "_rescued_data", "_corrupt_record"}
)
#: Statuses of rows that DROPMALFORMED drops and FAILFAST fails on.
MALFORMED = frozenset(
    {"invalid_prompt", "corrupt_envelope", "corrupt_content", "not_json", "truncated"}
)


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


# --- JSON Schema -> Spark ----------------------------------------------------------------------


def json_schema_to_spark(schema: Mapping[str, Any]) -> DataType:
    """Map a JSON Schema to a Spark type.

    object -> struct (property order kept), array -> array, integer -> bigint, number -> double,
    string with ``format: date-time``/``date`` -> timestamp/date, enum/const -> their base type,
    nullable forms -> the non-null type; unions of different types and free-form values -> string
    (holding the JSON text, as Spark's own JSON reader does).
    """
    return _Mapper(schema).map(schema, "$")


class _Mapper:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self._root = root
        self._stack: list[str] = []

    def map(self, node: Any, where: str) -> DataType:
        if node is True or node == {}:
            return StringType()
        if not isinstance(node, Mapping):
            raise SchemaError(f"JSON Schema at {where} must be an object, got {node!r}.")
        if "$ref" in node:
            return self._ref(node["$ref"], where)
        for key in ("anyOf", "oneOf"):
            if key in node:
                return self._union(
                    [self.map(b, f"{where}.{key}[{i}]") for i, b in enumerate(_non_null(node[key]))]
                )
        if "allOf" in node and len(node["allOf"]) == 1:
            return self.map(node["allOf"][0], f"{where}.allOf[0]")
        if "const" in node:
            return _type_of_values([node["const"]])
        if "enum" in node:
            return _type_of_values([v for v in node["enum"] if v is not None])
        declared = node.get("type")
        if isinstance(declared, list):
            kinds = [t for t in declared if t != "null"]
            return self._union([self.map({**node, "type": t}, where) for t in kinds])
        return self._typed(node, declared, where)

    def _typed(self, node: Mapping[str, Any], declared: Any, where: str) -> DataType:
        if declared == "object" or (declared is None and "properties" in node):
            props = node.get("properties")
            if not props:
                return StringType()
            return StructType(
                [StructField(name, self.map(sub, f"{where}.{name}")) for name, sub in props.items()]
            )
        if declared == "array" or (declared is None and "items" in node):
            items = node.get("items", {})
            return ArrayType(self.map(items, f"{where}[]"))
        if declared == "string":
            fmt = node.get("format")
            if fmt == "date-time":
                return TimestampType()
            return DateType() if fmt == "date" else StringType()
        simple: dict[Any, DataType] = {
            "integer": LongType(),
            "number": DoubleType(),
            "boolean": BooleanType(),
            "null": StringType(),
            None: StringType(),
        }
        if declared in simple:
            return simple[declared]
        raise SchemaError(
            f"JSON Schema at {where} has unknown type {declared!r}; expected one of object, "
            "array, string, integer, number, boolean, null."
        )

    def _ref(self, ref: Any, where: str) -> DataType:
        prefixes = ("#/$defs/", "#/definitions/")
        if not isinstance(ref, str) or not ref.startswith(prefixes):
            raise SchemaError(
                f"JSON Schema at {where} has $ref {ref!r}; only local references into $defs or "
                "definitions are supported. Inline the referenced schema."
            )
        if ref in self._stack:
            raise SchemaError(
                f"JSON Schema at {where} refers to {ref!r} recursively; Spark types cannot be "
                "recursive. Pin the column with a user schema (e.g. as STRING) instead."
            )
        section, name = ref[2:].split("/", 1)
        target = self._root.get(section, {}).get(name)
        if target is None:
            raise SchemaError(f"JSON Schema at {where}: $ref {ref!r} points to nothing.")
        self._stack.append(ref)
        try:
            return self.map(target, ref)
        finally:
            self._stack.pop()

    @staticmethod
    def _union(types: list[DataType]) -> DataType:
        if not types:
            return StringType()
        first = types[0]
        return first if all(t == first for t in types) else StringType()


def _non_null(branches: Iterable[Any]) -> list[Any]:
    return [b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")]


def _type_of_values(values: list[Any]) -> DataType:
    if values and all(isinstance(v, bool) for v in values):
        return BooleanType()
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return LongType()
    if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return DoubleType()
    return StringType()
