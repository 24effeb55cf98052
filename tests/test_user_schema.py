"""A user's ``.schema(...)`` that would lose answers fails ``.load()`` naming the columns and
what to write instead (dspark_json/load.py check_user_schema); the real-Spark case is in
tests/spark/test_schema_resolution.py."""

import json

import pytest
from pyspark.sql.types import StructField, StructType

from dspark_json.errors import SchemaError
from dspark_json.load import check_user_schema
from dspark_json.options import Options, Query
from dspark_json.schema.ddl import parse_hints
from tests.helpers import REVIEW_SCHEMA


def query(**options: str) -> Query:
    raw = {"endpoint": "http://127.0.0.1:1", "prompts": "/tmp/in", **options}
    parsed = Options.parse(raw)
    return Query(options=parsed, json_schema=parsed.request.response_format)


def check(q: Query, ddl: str, prompt_columns: list[str] | None = None) -> None:
    schema = StructType([StructField(path[0], dtype) for path, dtype in parse_hints(ddl)])
    check_user_schema(q, schema, lambda: prompt_columns)


def test_a_flat_schema_names_the_fields_inside_parsed_and_the_schema_to_write():
    with pytest.raises(SchemaError) as caught:
        check(
            query(responseFormat=json.dumps(REVIEW_SCHEMA)),
            "custom_id STRING, lang STRING, sentiment STRING, score DOUBLE",
            ["lang"],
        )
    message = str(caught.value)
    assert "sentiment (a field of the answers' JSON is in column parsed: parsed.sentiment)" in (
        message
    )
    assert "has no column the answers land in" in message
    assert (
        'Write .schema("custom_id STRING, lang STRING, parsed STRUCT<sentiment: STRING, '
        'score: DOUBLE>, _status STRING, _rescued_data STRING") and select parsed.sentiment, '
        "parsed.score." in message
    )


@pytest.mark.parametrize(
    ("ddl", "reason"),
    [
        (
            "custom_id STRING, parsed STRUCT<a: INT>, _schema_violations ARRAY<STRING>",
            "filled only with option validateSchema",
        ),
        ("Custom_Id STRING, parsed STRUCT<a: INT>", "Custom_Id (did you mean custom_id?)"),
        (
            "custom_id STRING, parsed STRUCT<a: INT>, foo INT",
            "foo (a field of the answers' JSON is in column parsed: parsed.foo)",
        ),
    ],
    ids=["option-off", "spelling", "unknown"],
)
def test_a_column_never_filled_is_named_with_why(ddl, reason):
    with pytest.raises(SchemaError, match="never fills") as caught:
        check(query(), ddl, [])
    assert reason in str(caught.value)


@pytest.mark.parametrize(
    ("ddl", "prompt_columns"),
    [
        ("custom_id STRING, parsed STRUCT<a: INT>, _status STRING", []),
        ("custom_id STRING, lang STRING, choices STRING", ["lang"]),
        ("custom_id STRING, lang STRING, _rescued_data STRING", None),  # no prompt line yet
        ("custom_id STRING, _schema_violations ARRAY<STRING>, _corrupt_record STRING", []),
    ],
)
def test_a_schema_that_keeps_the_answers_passes(ddl, prompt_columns):
    options = {"validateSchema": "true", "responseFormat": json.dumps(REVIEW_SCHEMA)}
    check(query(**options) if "violations" in ddl else query(), ddl, prompt_columns)
