import pytest
from pyspark.sql.types import StructType

from dspark_json import SchemaError, json_schema_to_spark
from dspark_json.schema.output import output_schema


def ddl(schema) -> str:
    return json_schema_to_spark(schema).simpleString()


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "integer"}, "bigint"),
        ({"type": "number"}, "double"),
        ({"type": "boolean"}, "boolean"),
        ({"type": "string"}, "string"),
        ({"type": "string", "format": "date-time"}, "timestamp"),
        ({"type": "string", "format": "date"}, "date"),
        ({"enum": ["a", "b"]}, "string"),
        ({"enum": [1, 2, None]}, "bigint"),
        ({"const": 1.5}, "double"),
        ({"type": ["integer", "null"]}, "bigint"),
        ({"anyOf": [{"type": "number"}, {"type": "null"}]}, "double"),
        ({"oneOf": [{"type": "number"}, {"type": "string"}]}, "string"),
        ({"type": ["integer", "string"]}, "string"),
        ({"type": "object"}, "string"),
        ({}, "string"),
        ({"type": "array"}, "array<string>"),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else None,
)
def test_scalar_and_union_mapping(schema, expected):
    assert ddl(schema) == expected


def test_object_keeps_property_order_and_nests():
    schema = {
        "type": "object",
        "properties": {
            "z": {"type": "string"},
            "a": {
                "type": "array",
                "items": {"type": "object", "properties": {"q": {"type": "integer"}}},
            },
        },
    }
    assert ddl(schema) == "struct<z:string,a:array<struct<q:bigint>>>"


def test_refs_into_defs_and_definitions():
    schema = {
        "type": "object",
        "properties": {"step": {"$ref": "#/$defs/Step"}, "old": {"$ref": "#/definitions/Old"}},
        "$defs": {"Step": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        "definitions": {"Old": {"type": "boolean"}},
    }
    assert ddl(schema) == "struct<step:struct<n:bigint>,old:boolean>"


def test_recursive_ref_holds_the_json_text():
    schema = {
        "$ref": "#/$defs/Node",
        "$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}},
    }
    assert ddl(schema) == "struct<child:string>"


def test_unsupported_ref_and_type():
    with pytest.raises(SchemaError, match="points outside this schema"):
        json_schema_to_spark({"$ref": "http://example.com/s.json"})
    with pytest.raises(SchemaError, match="unknown type 'decimal'"):
        json_schema_to_spark({"type": "decimal"})


def test_output_schema_column_order():
    schema = output_schema(
        passthrough=[], response_format={"type": "object", "properties": {"a": {"type": "integer"}}}
    )
    assert isinstance(schema, StructType)
    assert schema.names == [
        "custom_id",
        "id",
        "object",
        "created",
        "model",
        "choices",
        "usage",
        "system_fingerprint",
        "service_tier",
        "parsed",
        "_status",
        "_rescued_data",
        "_corrupt_record",
        "_error",
    ]
    message = schema["choices"].dataType.elementType["message"].dataType
    assert message["parsed"].dataType.simpleString() == "struct<a:bigint>"
    assert schema["created"].dataType.simpleString() == "timestamp"


def test_output_schema_without_response_format_has_no_parsed():
    assert "parsed" not in output_schema(response_format=None).names
