"""Spark DDL without a JVM: column hints (``parsed.score DOUBLE, tags ARRAY<STRING>``) in, schema
text out.

pyspark's own DDL parser lives in the JVM and needs a SparkSession; a data source's ``schema()``
runs in a Python worker that has none, so option ``schemaHints`` is read here.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from dspark_json.errors import OptionError
from dspark_json.schema.inference import TYPED_NESTING

__all__ = ["apply_hints", "parse_hints", "to_ddl"]

_SIMPLE: dict[str, DataType] = {
    "string": StringType(),
    "varchar": StringType(),
    "char": StringType(),
    "bigint": LongType(),
    "long": LongType(),
    "int": IntegerType(),
    "integer": IntegerType(),
    "smallint": ShortType(),
    "short": ShortType(),
    "tinyint": ByteType(),
    "byte": ByteType(),
    "double": DoubleType(),
    "float": FloatType(),
    "real": FloatType(),
    "boolean": BooleanType(),
    "timestamp": TimestampType(),
    "timestamp_ltz": TimestampType(),
    "timestamp_ntz": TimestampNTZType(),
    "date": DateType(),
    "binary": BinaryType(),
}
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*|\d+|\[\d*\]|[<>(),:.])")
#: A step into an array's elements in a hint's path (``choices[].message``; ``choices[0]``,
#: as ``_rescued_data`` and the drift messages spell it, means the same: every element).
ELEMENT = "[]"


class _Tokens:
    def __init__(self, text: str, option: str) -> None:
        self.text, self.option = text, option
        self.items: list[str] = []
        pos, end = 0, len(text.rstrip())
        while pos < end:
            match = _TOKEN.match(text, pos)
            if match is None:
                self.fail(f"unexpected {text[pos:].strip()[:20]!r}")
            assert match is not None
            self.items.append(match.group(1))
            pos = match.end()
        self.i = 0

    def peek(self) -> str | None:
        return self.items[self.i] if self.i < len(self.items) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.lower() != expected):
            self.fail(f"expected {expected or 'more'}, found {token or 'the end'}")
        self.i += 1
        assert token is not None
        return token

    def fail(self, why: str) -> None:
        shown = self.text if len(self.text) <= 200 else self.text[:200] + "..."
        raise OptionError(
            f"Option {self.option!r} is not a list of 'column TYPE' hints ({why}) in "
            f"{shown!r}. Example: 'parsed.score DOUBLE, parsed.tags ARRAY<STRING>'."
        )


def parse_hints(text: str, option: str = "schemaHints") -> list[tuple[tuple[str, ...], DataType]]:
    """``"a.b DOUBLE, c ARRAY<STRING>"`` -> [(("a", "b"), DoubleType()), (("c",), ...)]; a path
    goes into an array's elements with ``[]`` (or ``[0]``): ``choices[].message.x STRING`` ->
    (("choices", ELEMENT, "message", "x"), StringType())."""
    tokens = _Tokens(text, option)
    hints = []
    while tokens.peek() is not None:
        path = [_path_name(tokens)]
        while tokens.peek() == "." or (tokens.peek() or "").startswith("["):
            if tokens.take() == ".":
                path.append(_path_name(tokens))
            else:
                path.append(ELEMENT)
            if len(path) > TYPED_NESTING:
                tokens.fail(f"a column path of more than {TYPED_NESTING} names")
        hints.append((tuple(path), _type(tokens, 0)))
        if tokens.peek() is not None:
            tokens.take(",")
    return hints


def _path_name(tokens: _Tokens) -> str:
    token = tokens.take()
    if not (token.startswith("`") or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token)):
        tokens.fail(f"expected a column name, found {token}")
    return _name(token)


def _shown(path: tuple[str, ...]) -> str:
    """A hint's path as written: ``choices[].message.x``."""
    return "".join(part if part == ELEMENT or i == 0 else "." + part for i, part in enumerate(path))


def _name(token: str) -> str:
    return token[1:-1].replace("``", "`") if token.startswith("`") else token


def _type(tokens: _Tokens, depth: int) -> DataType:
    """The type at the tokens' position, ``depth`` types deep: at most
    :data:`~dspark_json.schema.inference.TYPED_NESTING`, as deep as inference types (Spark's
    own schema code recurses per level: a hostile hint is an OptionError, not a
    RecursionError)."""
    if depth >= TYPED_NESTING:
        tokens.fail(f"types nested more than {TYPED_NESTING} deep")
    word = tokens.take().lower()
    if word == "array":
        tokens.take("<")
        element = _type(tokens, depth + 1)
        tokens.take(">")
        return ArrayType(element)
    if word == "map":
        tokens.take("<")
        key = _type(tokens, depth + 1)
        tokens.take(",")
        value = _type(tokens, depth + 1)
        tokens.take(">")
        return MapType(key, value)
    if word == "struct":
        tokens.take("<")
        fields = []
        while tokens.peek() != ">":
            name = _name(tokens.take())
            if tokens.peek() == ":":
                tokens.take(":")
            fields.append(StructField(name, _type(tokens, depth + 1)))
            if tokens.peek() == ",":
                tokens.take(",")
        tokens.take(">")
        return StructType(fields)
    if word in ("decimal", "dec", "numeric"):
        precision, scale = 10, 0
        if tokens.peek() == "(":
            tokens.take("(")
            precision = int(tokens.take())
            if tokens.peek() == ",":
                tokens.take(",")
                scale = int(tokens.take())
            tokens.take(")")
        return DecimalType(precision, scale)
    if word in ("varchar", "char") and tokens.peek() == "(":
        tokens.take("(")
        tokens.take()
        tokens.take(")")
    if word not in _SIMPLE:
        tokens.fail(f"unknown type {word!r}")
    return _SIMPLE[word]


def apply_hints(
    schema: StructType, hints: list[tuple[tuple[str, ...], DataType]], option: str = "schemaHints"
) -> StructType:
    """``schema`` with each hinted column (a path into structs and arrays' elements) set to its
    type; a hinted column that is not there is added to its struct."""
    for path, dtype in hints:
        schema = _pin(schema, path, _Hint(path, dtype, option))
    return schema


class _Hint(NamedTuple):
    """One hint being applied: its whole path (for messages), its type, the option's name."""

    full: tuple[str, ...]
    dtype: DataType
    option: str


def _pin(struct: StructType, path: tuple[str, ...], hint: _Hint) -> StructType:
    name, rest = path[0], path[1:]
    fields = list(struct.fields)
    for i, field in enumerate(fields):
        if field.name != name:
            continue
        pinned = _into(field.dataType, rest, hint, name)
        fields[i] = StructField(name, pinned, field.nullable, field.metadata)
        return StructType(fields)
    if rest:
        raise OptionError(
            f"Option {hint.option!r}: {_shown(hint.full)} goes into {name!r}, which is not a "
            f"column here (columns: {', '.join(struct.names)}). Hint the whole struct, e.g. "
            f"'{name} STRUCT<{rest[0]}: ...>'."
        )
    return StructType([*fields, StructField(name, hint.dtype)])


def _into(current: DataType, rest: tuple[str, ...], hint: _Hint, name: str) -> DataType:
    """``current`` (the type at ``name``) with the rest of a hint's path pinned in it."""
    if not rest:
        return hint.dtype
    if rest[0] == ELEMENT:
        if not isinstance(current, ArrayType):
            raise OptionError(
                f"Option {hint.option!r}: {_shown(hint.full)} goes into the elements of "
                f"{name!r}, which is {current.simpleString()}, not an array. Hint {name!r} "
                "itself instead."
            )
        element = _into(current.elementType, rest[1:], hint, f"{name}[]")
        return ArrayType(element, current.containsNull)
    if not isinstance(current, StructType):
        raise OptionError(
            f"Option {hint.option!r}: {_shown(hint.full)} goes into {name!r}, which is "
            f"{current.simpleString()}, not a struct. Hint {name!r} itself instead."
        )
    return _pin(current, rest, hint)


def to_ddl(schema: StructType) -> str:
    """The schema as DDL that ``.schema(...)`` accepts."""
    return ", ".join(f"{_quote(f.name)} {_type_ddl(f.dataType)}" for f in schema.fields)


def _type_ddl(dtype: DataType) -> str:
    if isinstance(dtype, StructType):
        inner = ", ".join(f"{_quote(f.name)}: {_type_ddl(f.dataType)}" for f in dtype.fields)
        return f"STRUCT<{inner}>"
    if isinstance(dtype, ArrayType):
        return f"ARRAY<{_type_ddl(dtype.elementType)}>"
    if isinstance(dtype, MapType):
        return f"MAP<{_type_ddl(dtype.keyType)}, {_type_ddl(dtype.valueType)}>"
    return dtype.simpleString().upper()


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name.replace('`', '``')}`"
