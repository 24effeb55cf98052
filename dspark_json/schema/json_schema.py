"""JSON Schema -> Spark types: the type of ``parsed`` from the schema the model is asked to
follow."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.errors import SchemaError
from dspark_json.schema.inference import merge_types, scalar_type

__all__ = ["json_schema_to_spark"]


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
    """enum / const: the type all values share (ints and doubles widen), else string."""
    merged: DataType = NullType()
    for value in values:
        merged = merge_types(merged, scalar_type(value))
    return StringType() if isinstance(merged, NullType) else merged
