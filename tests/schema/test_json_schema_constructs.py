"""JSON Schema constructs as users write them (issue 17): tuples, maps, boolean subschemas,
unions of objects, allOf, every local $ref, recursion; and what is still refused."""

import logging

import pytest

from dspark_json import SchemaError, json_schema_to_spark


def ddl(schema) -> str:
    return json_schema_to_spark(schema).simpleString()


INT, STR, NUM = {"type": "integer"}, {"type": "string"}, {"type": "number"}


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        # tuples: a struct by position when the items' types differ, an array when they agree
        ({"type": "array", "prefixItems": [INT, STR]}, "struct<_1:bigint,_2:string>"),
        ({"prefixItems": [INT, STR], "items": False}, "struct<_1:bigint,_2:string>"),
        ({"prefixItems": [INT, INT], "minItems": 2, "maxItems": 2}, "array<bigint>"),
        ({"prefixItems": [INT, INT], "items": INT}, "array<bigint>"),
        ({"prefixItems": [INT, STR], "items": NUM}, "array<string>"),  # open tail, mixed
        ({"prefixItems": [INT, False]}, "array<bigint>"),  # nothing after item 0
        ({"prefixItems": [False]}, "array<string>"),  # always empty
        ({"items": [INT, STR], "additionalItems": False}, "struct<_1:bigint,_2:string>"),  # 7
        ({"items": [INT, {"type": "boolean"}]}, "struct<_1:bigint,_2:boolean>"),
        # maps: additionalProperties with a schema and no properties
        ({"type": "object", "additionalProperties": INT}, "map<string,bigint>"),
        (
            {"additionalProperties": {"type": "object", "properties": {"a": NUM}}},
            "map<string,struct<a:double>>",
        ),
        ({"additionalProperties": {"type": "array", "items": STR}}, "map<string,array<string>>"),
        ({"patternProperties": {"^a": INT}, "additionalProperties": False}, "map<string,bigint>"),
        ({"patternProperties": {"^a": INT}}, "map<string,string>"),  # others: anything
        ({"type": "object", "additionalProperties": True}, "string"),  # free-form
        ({"type": "object", "additionalProperties": False}, "string"),  # always {}
        ({"properties": {"a": INT}, "additionalProperties": INT}, "struct<a:bigint>"),
        # boolean subschemas
        (True, "string"),
        ({"properties": {"a": True, "b": False, "c": INT}}, "struct<a:string,c:bigint>"),
        ({"properties": {"b": False}}, "string"),
        ({"type": "array", "items": False}, "array<string>"),
        ({"type": "array", "items": True}, "array<string>"),
        ({"anyOf": [False, INT]}, "bigint"),
        ({"allOf": [True, INT]}, "bigint"),
        # unions of objects: one struct, the union of the fields in first-seen order
        (
            {
                "oneOf": [
                    {"type": "object", "properties": {"kind": {"const": "a"}, "x": INT}},
                    {"type": "object", "properties": {"kind": {"const": "b"}, "y": STR}},
                ]
            },
            "struct<kind:string,x:bigint,y:string>",
        ),
        (
            {"anyOf": [{"properties": {"v": INT}}, {"properties": {"v": STR}}]},
            "struct<v:string>",  # a shared field of different scalar types: the JSON text
        ),
        (
            {"anyOf": [{"properties": {"o": {"properties": {"a": INT}}}}, {"type": "null"}]},
            "struct<o:struct<a:bigint>>",
        ),
        (
            {
                "anyOf": [
                    {"items": {"properties": {"a": INT}}},
                    {"items": {"properties": {"b": INT}}},
                ]
            },
            "array<struct<a:bigint,b:bigint>>",
        ),
        (
            {"anyOf": [{"additionalProperties": INT}, {"additionalProperties": INT}]},
            "map<string,bigint>",
        ),
        ({"anyOf": [{"properties": {"a": INT}}, {"type": "object"}]}, "string"),
        ({"anyOf": [{"properties": {"a": INT}}, INT]}, "string"),
        # unions of scalars keep the rule: different types -> the JSON text
        ({"anyOf": [INT, NUM]}, "string"),
        ({"type": ["integer", "number"]}, "string"),
        ({"enum": [None]}, "string"),
        ({"const": None}, "string"),
        # allOf: what every part allows, the fields of all
        (
            {"allOf": [{"properties": {"a": INT}}, {"properties": {"b": STR}}]},
            "struct<a:bigint,b:string>",
        ),
        ({"allOf": [{"type": "object"}, {"properties": {"a": INT}}]}, "struct<a:bigint>"),
        ({"allOf": [{"type": "string"}, {"type": "string", "format": "date"}]}, "date"),
        ({"allOf": [{"type": "number"}, {"type": "integer"}]}, "bigint"),
        (
            {"type": "object", "properties": {"a": INT}, "allOf": [{"properties": {"b": INT}}]},
            "struct<a:bigint,b:bigint>",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_construct_mapping(schema, expected):
    assert ddl(schema) == expected


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (
            {"properties": {"a": INT, "b": {"$ref": "#/properties/a"}}},
            "struct<a:bigint,b:bigint>",
        ),
        ({"items": [INT, {"$ref": "#/items/0"}]}, "array<bigint>"),
        (
            {
                "$defs": {"a/b": INT, "c~d": STR, "e%f": NUM, 'g"h': {"type": "boolean"}},
                "properties": {
                    "slash": {"$ref": "#/$defs/a~1b"},
                    "tilde": {"$ref": "#/$defs/c~0d"},
                    "percent": {"$ref": "#/$defs/e%25f"},
                    "quote": {"$ref": "#/$defs/g%22h"},
                },
            },
            "struct<slash:bigint,tilde:string,percent:double,quote:boolean>",
        ),
        (
            {
                "$defs": {"A": {"$anchor": "year", "type": "integer"}},
                "properties": {"y": {"$ref": "#year"}},
            },
            "struct<y:bigint>",
        ),
        (
            {
                "$id": "https://example.com/root.json",
                "$defs": {
                    "A": {"$id": "parts/a.json", "$defs": {"B": {"type": "boolean"}}},
                    "C": {"$id": "urn:example:c", "type": "number"},
                },
                "properties": {
                    "rel": {"$ref": "parts/a.json#/$defs/B"},
                    "abs": {"$ref": "https://example.com/parts/a.json#/$defs/B"},
                    "urn": {"$ref": "urn:example:c"},
                    "ptr": {"$ref": "#/$defs/C"},
                },
            },
            "struct<rel:boolean,abs:boolean,urn:double,ptr:double>",
        ),
        (  # inside a resource, "#/..." is relative to that resource, not the root
            {
                "$defs": {
                    "inner": {
                        "$id": "https://example.com/inner.json",
                        "$defs": {"x": STR},
                        "properties": {"v": {"$ref": "#/$defs/x"}},
                    },
                    "x": INT,
                },
                "$ref": "https://example.com/inner.json",
            },
            "struct<v:string>",
        ),
        (  # draft-07: a plain-name $id is an anchor, and $ref ignores its siblings
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "definitions": {"A": {"$id": "#thing", "type": "integer"}},
                "properties": {"a": {"$ref": "#thing", "type": "string"}},
            },
            "struct<a:bigint>",
        ),
        (  # 2020-12: $ref applies with its siblings
            {
                "$defs": {"A": {"properties": {"a": INT}}},
                "properties": {"o": {"$ref": "#/$defs/A", "properties": {"b": STR}}},
            },
            "struct<o:struct<a:bigint,b:string>>",
        ),
        ({"$defs": {"T": INT}, "items": {"$dynamicRef": "#/$defs/T"}}, "array<bigint>"),
        (
            {
                "$defs": {"T": {"$dynamicAnchor": "t", "type": "boolean"}},
                "items": {"$dynamicRef": "#t"},
            },
            "array<boolean>",
        ),
        (
            {"$defs": {"no": False}, "properties": {"a": {"$ref": "#/$defs/no"}, "b": INT}},
            "struct<b:bigint>",
        ),
    ],
    ids=[
        "pointer-properties",
        "pointer-items",
        "escapes",
        "anchor",
        "id-relative",
        "resource-pointer",
        "draft7",
        "ref-siblings",
        "dynamicRef",
        "dynamicAnchor",
        "ref-false",
    ],
)
def test_every_local_reference_resolves(schema, expected):
    assert ddl(schema) == expected


def test_recursion_becomes_json_text_with_one_info_line(caplog):
    node = {
        "type": "object",
        "properties": {"name": STR, "children": {"type": "array", "items": {"$ref": "#/$defs/N"}}},
    }
    schema = {"$defs": {"N": node}, "$ref": "#/$defs/N"}
    with caplog.at_level(logging.INFO, logger="dspark_json"):
        assert ddl(schema) == "struct<name:string,children:array<string>>"
    lines = [r.getMessage() for r in caplog.records if r.name == "dspark_json"]
    assert len(lines) == 1
    assert "parsed.children[] (#/$defs/N" in lines[0]
    assert "from_json(<col>, 'name STRING, children ARRAY<STRING>')" in lines[0]
    assert "variant_get(parse_json(<col>)" in lines[0]


def test_recursion_through_the_root_and_mutual_recursion(caplog):
    root = {"type": "object", "properties": {"v": INT, "next": {"$ref": "#"}}}
    assert ddl(root) == "struct<v:bigint,next:string>"
    mutual = {
        "$defs": {
            "A": {"properties": {"b": {"$ref": "#/$defs/B"}, "n": INT}},
            "B": {"properties": {"a": {"$ref": "#/$defs/A"}, "s": STR}},
        },
        "properties": {"top": {"$ref": "#/$defs/A"}},
    }
    with caplog.at_level(logging.INFO, logger="dspark_json"):
        assert ddl(mutual) == "struct<top:struct<b:struct<a:string,s:string>,n:bigint>>"
    assert "parsed.top.b.a (#/$defs/A" in caplog.text


def test_no_info_line_without_recursion(caplog):
    with caplog.at_level(logging.INFO, logger="dspark_json"):
        twice = {"a": {"$ref": "#/$defs/A"}, "b": {"$ref": "#/$defs/A"}}
        assert ddl({"$defs": {"A": INT}, "properties": twice}) == "struct<a:bigint,b:bigint>"
    assert not caplog.records


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"$ref": "https://example.com/other.json"}, r"points outside this schema.*under \$defs"),
        ({"properties": {"a": {"$ref": "other.json#/x"}}}, r"parsed\.a has \$ref 'other\.json#/x'"),
        ({"$ref": "#/$defs/missing", "$defs": {}}, r"points to nothing.*'missing'"),
        ({"$ref": "#nowhere"}, r"no \$anchor 'nowhere'"),
        ({"$ref": 3}, r"\$ref must be a URI string"),
        (False, "allows no value at all"),
        ({"allOf": [True, False]}, "allows no value at all"),
        ({"anyOf": "x"}, "anyOf must be a list"),
        ({"enum": 5}, "enum must be a list"),
        ({"properties": [1]}, "properties must map names to schemas"),
        ({"type": {"a": 1}}, "unknown type"),
        ({"type": "decimal"}, "unknown type 'decimal'"),
        ({"items": 5}, r"at parsed\[\] must be an object or a boolean, got 5"),
    ],
)
def test_refused_with_the_path_and_the_fix(schema, message):
    with pytest.raises(SchemaError, match=message):
        json_schema_to_spark(schema)


def test_too_deep_is_a_schema_error_not_a_crash():
    schema: dict = {"type": "integer"}
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    with pytest.raises(SchemaError, match="nests too deep"):
        json_schema_to_spark(schema)


def doubling(levels: int) -> dict:
    """Each level refers to the one below twice: 2**levels leaves once unfolded."""
    defs: dict = {"D0": INT}
    for i in range(1, levels + 1):
        below = {"$ref": f"#/$defs/D{i - 1}"}
        defs[f"D{i}"] = {"properties": {"a": below, "b": below}}
    return {"$defs": defs, "$ref": f"#/$defs/D{levels}"}


def test_shared_definitions_map_once_and_a_type_too_big_is_refused():
    assert ddl(doubling(10)).count("bigint") == 2**10
    with pytest.raises(SchemaError, match=r"of \d+ fields .* Pin the column"):
        json_schema_to_spark(doubling(60))
