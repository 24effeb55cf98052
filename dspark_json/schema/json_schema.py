"""JSON Schema -> Spark types: the type of ``parsed`` from the schema the model is asked to
follow (a Pydantic model's ``model_json_schema()`` included).

Types are computed with three stand-ins that settle to string at the end: ``NullType`` (only
null: a union drops it), string (any JSON value, held as its text: a union with it is string, an
intersection ignores it) and ``None`` (``false``: no value at all, so the field cannot appear).

Mapping is bounded in time and memory whatever the schema: each definition a ``$ref`` points to
is mapped once and its type reused wherever it is referred to (a reference back into a
definition being mapped is cut to string), so the unions of definitions that refer to each
other fold into one type each; and a budget of steps (:data:`_MAX_STEPS`) and of unfolded
fields (:data:`_MAX_FIELDS`, checked as types are built) refuses a schema past it with a
:class:`~dspark_json.errors.SchemaError` naming the part being mapped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.errors import SchemaError
from dspark_json.response.convert import tuple_field
from dspark_json.schema.ddl import to_ddl
from dspark_json.schema.inference import merge_types, scalar_type, settle
from dspark_json.schema.refs import Document

__all__ = ["ResponseFormat", "as_json_schema", "json_schema_to_spark"]

#: What ``response_format`` takes in the Python API: a JSON Schema, or a Pydantic model class.
ResponseFormat: TypeAlias = Mapping[str, Any] | type

logger = logging.getLogger("dspark_json")

_SCALARS: dict[str, DataType] = {
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
    "null": NullType(),
}
_KINDS = "object, array, string, integer, number, boolean, null"
#: A bound on the unfolded size of a type: shared definitions can nest exponentially.
_MAX_FIELDS = 100_000
#: A bound on the work of one mapping: schema nodes visited plus types merged (a few seconds).
_MAX_STEPS = 200_000
#: The most places cut short that the INFO line about recursion lists.
_CUTS_LOGGED = 20

_Type = DataType | None  # None: `false`, no value at all


def json_schema_to_spark(schema: Mapping[str, Any] | bool, *, column: str = "parsed") -> DataType:
    """Map a JSON Schema to a Spark type (docs/guide/schema.md has the table).

    object -> struct (property order kept); ``additionalProperties`` with a schema and no
    properties -> map<string, T>; array -> array; ``prefixItems`` tuples -> struct<_1, _2, ...>
    (an array where the items' types agree); integer -> bigint, number -> double; string with
    ``format: date-time``/``date`` -> timestamp/date; enum/const -> their base type; nullable
    forms -> the type; ``anyOf``/``oneOf`` of objects -> one struct with the union of their
    fields; ``allOf`` -> the fields of all; every local ``$ref`` is followed, and a recursive one
    becomes string (the JSON text), logged once at INFO with how to read it. Other unions of
    different types, free-form objects and ``true`` -> string (the JSON text, as Spark's own JSON
    reader does). ``column`` names the column in messages.
    """
    try:
        mapper = _Mapper(schema, column)
        mapped = mapper.map(schema, column)
    except RecursionError as exc:
        raise SchemaError(
            f"JSON Schema of {column} nests too deep to map; flatten it, or pin the column "
            "with a user schema."
        ) from exc
    if mapped is None:
        raise SchemaError(
            f"JSON Schema of {column} allows no value at all (it is `false`, or its parts "
            "exclude each other), so no answer could match it. Fix the schema."
        )
    mapper.check_size(mapped, column)
    settled = settle(mapped)
    if mapper.cycles:
        mapper.typed.setdefault(id(schema), settled)
        _log_cycles(mapper.cycles, mapper.typed)
    return settled


def _log_cycles(cycles: list[tuple[str, str, int]], typed: Mapping[int, _Type]) -> None:
    """One INFO line: where a recursive schema was cut, and the ``from_json`` to read it."""
    cuts = []
    ddls: dict[int, str] = {}  # each target's DDL once, however many cuts refer back to it
    for path, ref, target in cycles[:_CUTS_LOGGED]:
        dtype = typed.get(target)
        if dtype is None:
            cuts.append(f"{path} ({ref})")
            continue
        if target not in ddls:
            dtype = settle(dtype)
            ddls[target] = to_ddl(dtype) if isinstance(dtype, StructType) else dtype.simpleString()
        cuts.append(f"{path} ({ref}: from_json(<col>, '{ddls[target]}'))")
    if len(cycles) > _CUTS_LOGGED:
        cuts.append(f"and {len(cycles) - _CUTS_LOGGED} more")
    logger.info(
        "The JSON Schema is recursive and Spark types cannot nest without end, so these hold "
        "the JSON text (string) of what they refer back to: %s. Read them with from_json as "
        "shown, or variant_get(parse_json(<col>), '$.<field>', '<type>'); or pin them with a "
        "user schema.",
        "; ".join(cuts),
    )


def as_json_schema(response_format: ResponseFormat | None) -> Mapping[str, Any] | None:
    """``response_format`` as a JSON Schema: a Pydantic model class gives its
    ``model_json_schema()`` (pydantic is imported only then); a mapping is returned as is."""
    if response_format is None or isinstance(response_format, Mapping):
        return response_format
    if isinstance(response_format, type):
        try:
            from pydantic import BaseModel
        except ImportError as exc:
            raise SchemaError(
                f"response_format={response_format.__name__} is a class, which needs pydantic "
                "(pip install 'pydantic>=2'); or pass its JSON Schema as a dict."
            ) from exc
        if issubclass(response_format, BaseModel):
            schema: dict[str, Any] = response_format.model_json_schema()
            return schema
    raise SchemaError(
        f"response_format={response_format!r} is neither a JSON Schema (a dict) nor a Pydantic "
        "model class; pass Model or Model.model_json_schema()."
    )


class _Budget:
    """The steps one mapping may take (:data:`_MAX_STEPS`); ``where`` is the part being mapped,
    named when the budget runs out."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.left = _MAX_STEPS
        self.where = column

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise SchemaError(
                f"JSON Schema of {self.column} is too large or too intricate to map: mapping "
                f"it took more than {_MAX_STEPS} steps, stopped at {_short(self.where)}. "
                "Simplify that part, or pin the column with a user schema (e.g. as STRING, the "
                "JSON text)."
            )


class _Mapper:
    def __init__(self, root: Mapping[str, Any] | bool, column: str = "parsed") -> None:
        self._doc = Document(root)
        self.column = column
        self.budget = _Budget(column)
        #: id -> (type, unfolded size): the type is held so that its id stays its own.
        self._sizes: dict[int, tuple[DataType, int]] = {}
        self._open: list[int] = [id(root)]  # the schemas being mapped, outermost first
        #: (column path, $ref, target) where a reference points back to a schema being mapped.
        self.cycles: list[tuple[str, str, int]] = []
        #: The type of each schema a reference points to, where it was mapped outermost.
        self.typed: dict[int, _Type] = {}
        self._done: dict[int, _Type] = {}  # the same, for those mapped without a cycle cut

    def map(self, node: Any, where: str) -> _Type:
        self.budget.where = where
        self.budget.spend()
        if isinstance(node, bool):
            return StringType() if node else None
        if not isinstance(node, Mapping):
            raise SchemaError(
                f"JSON Schema at {where} must be an object or a boolean, got {node!r}."
            )
        parts: list[_Type] = []
        for key in ("$ref", "$dynamicRef", "$recursiveRef"):
            if key in node:
                parts.append(self._ref(node, key, where))
                if self._doc.legacy and key == "$ref":  # draft-07: $ref ignores its siblings
                    return parts[-1]
        parts.append(self._declared(node, where))
        if "allOf" in node:
            parts += [self.map(b, f"{where}.allOf[{i}]") for i, b in _items(node, "allOf", where)]
        for key in ("anyOf", "oneOf"):
            if key in node:
                branches = [self.map(b, f"{where}.{key}[{i}]") for i, b in _items(node, key, where)]
                self.budget.where = f"{where}.{key}"
                parts.append(_either(branches, self.budget))
        if "const" in node:
            parts.append(_type_of_values([node["const"]]))
        elif "enum" in node:
            parts.append(_type_of_values([v for _, v in _items(node, "enum", where)]))
        self.budget.where = where
        return _all(parts, self.budget)

    def check_size(self, dtype: _Type, where: str, ref: str | None = None) -> None:
        """Refuse ``dtype`` where its unfolded size passes :data:`_MAX_FIELDS` (shared parts
        counted once each, from what earlier checks found)."""
        if dtype is None:
            return
        fields = _count(dtype, self._sizes)
        if fields > _MAX_FIELDS:
            what = f" in {ref} (reached at {_short(where)})" if ref is not None else ""
            raise SchemaError(
                f"JSON Schema of {self.column} would make a Spark type of {fields} fields"
                f"{what} (its shared parts nest into each other); at most "
                f"{_MAX_FIELDS} are mapped. Pin the column with a user schema (e.g. as STRING, "
                "the JSON text)."
            )

    def _declared(self, node: Mapping[str, Any], where: str) -> _Type:
        declared = node.get("type")
        if declared is None:
            if any(k in node for k in ("properties", "additionalProperties", "patternProperties")):
                declared = "object"
            elif "items" in node or "prefixItems" in node:
                declared = "array"
            else:
                return StringType()  # unconstrained
        if isinstance(declared, list):
            return _either([self._typed(node, t, where) for t in declared], self.budget)
        return self._typed(node, declared, where)

    def _typed(self, node: Mapping[str, Any], declared: Any, where: str) -> _Type:
        if declared == "object":
            return self._object(node, where)
        if declared == "array":
            return self._array(node, where)
        if declared == "string":
            fmt = node.get("format")
            if fmt == "date-time":
                return TimestampType()
            return DateType() if fmt == "date" else StringType()
        if isinstance(declared, str) and declared in _SCALARS:
            return _SCALARS[declared]
        raise SchemaError(
            f"JSON Schema at {where} has unknown type {declared!r}; expected one of {_KINDS}."
        )

    def _object(self, node: Mapping[str, Any], where: str) -> _Type:
        props = node.get("properties") or {}
        if not isinstance(props, Mapping):
            raise SchemaError(
                f"JSON Schema at {where}: properties must map names to schemas, got {props!r}."
            )
        if props:
            fields = [(str(name), self.map(sub, f"{where}.{name}")) for name, sub in props.items()]
            kept = [StructField(name, t) for name, t in fields if t is not None]
            return StructType(kept) if kept else StringType()
        # No properties: a map when the values are described, else free-form (the JSON text).
        values = [s for _, s in sorted(_named(node, "patternProperties", where).items())]
        extra = node.get("additionalProperties", True)
        if extra is not True and extra != {}:
            values.append(extra)
        elif not values:
            return StringType()
        else:
            values.append(True)
        types = [self.map(s, f"{where}{{}}") for s in values]
        value = _either(types, self.budget)
        return StringType() if value is None else MapType(StringType(), value)

    def _array(self, node: Mapping[str, Any], where: str) -> _Type:
        prefix, rest = node.get("prefixItems"), node.get("items")
        if isinstance(rest, list):  # draft-07 and earlier: items as a list is the tuple
            prefix, rest = rest, node.get("additionalItems")
        if isinstance(prefix, list) and prefix:
            return self._tuple(node, prefix, rest, where)
        element = self.map(True if rest is None else rest, f"{where}[]")
        return ArrayType(StringType() if element is None else element)

    def _tuple(self, node: Mapping[str, Any], prefix: list[Any], rest: Any, where: str) -> _Type:
        """``prefixItems``: an array when the items' types agree, else a struct ``_1``, ``_2``...
        (an open tail of another type: an array of the union)."""
        types: list[DataType] = []
        for i, sub in enumerate(prefix):
            mapped = self.map(sub, f"{where}[{i}]")
            if mapped is None:  # no item can be here, so none after it either
                rest = False
                break
            types.append(mapped)
        limit = node.get("maxItems")
        closed = rest is False or (isinstance(limit, int) and limit <= len(types))
        untyped = rest is None or rest is True or rest == {}
        tail = None if closed or untyped else self.map(rest, f"{where}[]")
        if not types:
            return ArrayType(StringType() if tail is None else tail)
        together = [*types, *([] if tail is None else [tail])]
        if all(t == together[0] for t in together):
            return ArrayType(together[0])
        if tail is not None:
            return ArrayType(_either(together, self.budget) or StringType())
        return StructType([StructField(tuple_field(i), t) for i, t in enumerate(types)])

    def _ref(self, node: Mapping[str, Any], key: str, where: str) -> _Type:
        ref = node[key]
        if not isinstance(ref, str):
            raise SchemaError(f"JSON Schema at {where}: {key} must be a URI string, got {ref!r}.")
        target = self._doc.resolve(node, ref, where)
        target_id = id(target)
        if target_id in self._done:  # mapped once, whatever the path: a schema of shared parts
            return self._done[target_id]  # stays linear, not exponential
        if target_id in self._open:
            self.cycles.append((where, ref, target_id))
            return StringType()
        self._open.append(target_id)
        try:
            mapped = self.map(target, where)
        finally:
            self._open.pop()
        self.check_size(mapped, where, ref)
        self.typed.setdefault(target_id, mapped)
        # Once, even where a cut inside made it depend on the path it was first reached by:
        # definitions that refer to each other would otherwise be mapped once per path
        # (exponentially many), each union of them unfolded anew.
        self._done[target_id] = mapped
        return mapped


def _short(where: str, keep: int = 120) -> str:
    """A column path as messages show it: its last ``keep`` characters."""
    return where if len(where) <= keep else "..." + where[-keep:]


def _items(node: Mapping[str, Any], key: str, where: str) -> list[tuple[int, Any]]:
    value = node[key]
    if not isinstance(value, list):
        raise SchemaError(f"JSON Schema at {where}: {key} must be a list, got {value!r}.")
    return list(enumerate(value))


def _named(node: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = node.get(key, {})
    if not isinstance(value, Mapping):
        raise SchemaError(
            f"JSON Schema at {where}: {key} must map names to schemas, got {value!r}."
        )
    return value


def _either(types: Sequence[_Type], budget: _Budget) -> _Type:
    """anyOf / oneOf / a list of types: ``false`` and null branches drop out; the same type
    stays; objects merge their fields; arrays and maps merge their elements; else string."""
    kept = [t for t in types if t is not None and not isinstance(t, NullType)]
    if not kept:
        return NullType() if any(t is not None for t in types) else None
    merged = kept[0]
    for t in kept[1:]:
        merged = _or(merged, t, budget)
    return merged


def _or(a: DataType, b: DataType, budget: _Budget) -> DataType:
    budget.spend()
    if a is b or a == b:
        return a
    if isinstance(a, NullType):
        return b
    if isinstance(b, NullType):
        return a
    if isinstance(a, StructType) and isinstance(b, StructType):
        return _fields(a, b, _or, budget)
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return ArrayType(_or(a.elementType, b.elementType, budget))
    if isinstance(a, MapType) and isinstance(b, MapType):
        return MapType(StringType(), _or(a.valueType, b.valueType, budget))
    return StringType()


def _all(types: Sequence[_Type], budget: _Budget) -> _Type:
    """allOf, and a schema's keywords together: what every part allows."""
    merged: _Type = StringType()
    for t in types:
        if t is None or merged is None:
            return None
        merged = _and(merged, t, budget)
    return merged


def _and(a: DataType, b: DataType, budget: _Budget) -> DataType:
    budget.spend()
    if a is b or a == b or isinstance(b, StringType):
        return a
    if isinstance(a, StringType | NullType):  # null and a type: keep the type
        return b
    if isinstance(b, NullType):
        return a
    if isinstance(a, StructType) and isinstance(b, StructType):
        return _fields(a, b, _and, budget)
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return ArrayType(_and(a.elementType, b.elementType, budget))
    if isinstance(a, MapType) and isinstance(b, MapType):
        return MapType(StringType(), _and(a.valueType, b.valueType, budget))
    if isinstance(a, StructType) and isinstance(b, MapType):
        return a
    if isinstance(b, StructType) and isinstance(a, MapType):
        return b
    if {type(a), type(b)} == {LongType, DoubleType}:
        return LongType()
    return StringType()  # parts that exclude each other: keep whatever comes, as text


def _fields(a: StructType, b: StructType, merge: Any, budget: _Budget) -> StructType:
    """The fields of ``a`` in order, then those only ``b`` has; shared ones merged."""
    types = {f.name: f.dataType for f in a.fields}
    for f in b.fields:
        budget.spend()
        types[f.name] = merge(types[f.name], f.dataType, budget) if f.name in types else f.dataType
    return StructType([StructField(name, t) for name, t in types.items()])


def _count(dtype: DataType, seen: dict[int, tuple[DataType, int]]) -> int:
    """How many fields, elements and values ``dtype`` holds, all nesting unfolded (its parts
    may be shared, so each is counted once and reused; ``seen`` holds each type counted)."""
    known = seen.get(id(dtype))
    if known is not None:
        return known[1]
    if isinstance(dtype, StructType):
        count = 1 + sum(_count(f.dataType, seen) for f in dtype.fields)
    elif isinstance(dtype, ArrayType):
        count = 1 + _count(dtype.elementType, seen)
    elif isinstance(dtype, MapType):
        count = 1 + _count(dtype.valueType, seen)
    else:
        count = 1
    seen[id(dtype)] = (dtype, count)
    return count


def _type_of_values(values: list[Any]) -> DataType:
    """enum / const: the type all values share (ints and doubles widen; null only: null),
    else string."""
    merged: DataType = NullType()
    for value in values:
        merged = merge_types(merged, scalar_type(value))
    return merged
