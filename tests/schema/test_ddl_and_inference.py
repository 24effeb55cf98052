import json

import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from dspark_json import OptionError
from dspark_json.schema.ddl import apply_hints, parse_hints, to_ddl
from dspark_json.schema.inference import contents_of, infer_type


def test_hints_parse_paths_and_nested_types():
    hints = parse_hints(
        "parsed.score DECIMAL(5, 2), `odd name`.x ARRAY<STRUCT<a: INT, b STRING>>, "
        "m MAP<STRING, BIGINT>"
    )
    assert hints == [
        (("parsed", "score"), DecimalType(5, 2)),
        (
            ("odd name", "x"),
            ArrayType(
                StructType([StructField("a", IntegerType()), StructField("b", StringType())])
            ),
        ),
        (("m",), MapType(StringType(), LongType())),
    ]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("parsed.score", "expected more, found the end"),
        ("score DUBBLE", "unknown type 'dubble'"),
        ("a ARRAY<INT", "expected >, found the end"),
        ("a INT;", "unexpected ';'"),
    ],
)
def test_bad_hints_say_what_and_show_an_example(text, why):
    with pytest.raises(OptionError, match=rf"'schemaHints'.*\({why}\).*Example"):
        parse_hints(text)


def test_hints_pin_and_add_columns_and_ddl_prints_them():
    schema = StructType(
        [
            StructField("custom_id", StringType()),
            StructField("parsed", StructType([StructField("score", StringType())])),
        ]
    )
    pinned = apply_hints(schema, parse_hints("parsed.score DOUBLE, parsed.new INT, extra STRING"))
    assert to_ddl(pinned) == (
        "custom_id STRING, parsed STRUCT<score: DOUBLE, new: INT>, extra STRING"
    )
    with pytest.raises(OptionError, match=r"parsed.score.x goes into 'score', which is double"):
        apply_hints(pinned, parse_hints("parsed.score.x INT"))
    with pytest.raises(OptionError, match=r"'nope', which is not a column here"):
        apply_hints(pinned, parse_hints("nope.x INT"))


def test_inference_unions_fields_and_widens():
    samples = [
        {"label": "a", "score": 1, "tags": ["x"], "meta": {"k": 1}, "maybe": None},
        {"label": "b", "score": 2.5, "tags": [], "meta": {"j": True}, "extra": [1, 2.0]},
        {"label": 3, "score": 3, "maybe": None},
    ]
    assert infer_type(samples) == StructType(
        [
            StructField("label", StringType()),  # string and int: string
            StructField("score", DoubleType()),  # int and double: double
            StructField("tags", ArrayType(StringType())),
            StructField(
                "meta",
                StructType([StructField("k", LongType()), StructField("j", BooleanType())]),
            ),
            StructField("maybe", StringType()),  # only ever null: string
            StructField("extra", ArrayType(DoubleType())),
        ]
    )
    assert infer_type([]) == StringType()


def test_contents_follow_the_parser_rule():
    def body(content):
        return json.dumps({"choices": [{"message": {"content": content}}]})

    bodies = [
        body('{"a": 1}'),
        body('Sure!\n```json\n{"a": 2}\n```'),
        body("no json here"),
        body('{"a": '),  # a candidate that is not valid JSON
        "not a body",
        None,
    ]
    assert contents_of(bodies) == [{"a": 1}, {"a": 2}]
