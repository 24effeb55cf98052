"""The row contract: statuses, the record mode applied the same way for every entry point."""

import json

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType

import dspark_json
from dspark_json import pipeline
from dspark_json.errors import RecordError
from dspark_json.load import added_columns, query_schema
from dspark_json.options import OPTION_SPECS, Options, Query
from dspark_json.parse.reference import ReferenceParser
from dspark_json.rows import (
    COLUMNS,
    MALFORMED,
    OPTIONAL_COLUMNS,
    PARSER_COLUMNS,
    STATUSES,
    SYSTEM_COLUMNS,
    SYSTEM_FIELDS,
    Status,
    apply_mode,
    row_error,
)
from dspark_json.schema.output import (
    ENVELOPE_COLUMNS,
    RESPONSE_COLUMNS,
    output_schema,
)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def body(content, finish="stop"):
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1767225600,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish,
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        }
    )


def test_malformed_statuses_are_statuses():
    assert set(MALFORMED) < set(STATUSES) and "ok" not in MALFORMED


def test_each_status_is_one_member_its_word_and_its_meaning():
    assert list(STATUSES) == [status.value for status in Status]
    for status in Status:
        assert status.meaning and STATUSES[status] == status.meaning
        assert Status(status.value) is status and status == status.value
    assert Status.NOT_JSON in MALFORMED and "not_json" in MALFORMED
    assert Status.EMPTY not in MALFORMED and Status.HTTP_ERROR not in MALFORMED


def test_the_output_schema_is_the_envelope_parsed_and_the_system_fields():
    schema = output_schema(response_format=SCHEMA, tools={"f": StringType()})
    names = ["custom_id", *ENVELOPE_COLUMNS, "parsed", "tool_calls", *SYSTEM_COLUMNS]
    assert schema.names == names
    assert schema.fields[-len(SYSTEM_FIELDS) :] == list(SYSTEM_FIELDS)
    # The parser fills every column of a response but the request's own _error.
    assert set(schema.names) - {"custom_id", "_error"} == RESPONSE_COLUMNS
    assert set(PARSER_COLUMNS) == set(SYSTEM_COLUMNS) - {"_error"}


def test_the_registry_defines_each_system_column_once_in_the_output_order():
    assert [c.name for c in COLUMNS] == [
        "_status",
        "_rescued_data",
        "_corrupt_record",
        "_error",
        "_schema_violations",
        "_attempts",
    ]
    assert len({c.name for c in COLUMNS}) == len(COLUMNS)
    assert tuple(c.field for c in COLUMNS if c.option is None) == SYSTEM_FIELDS
    # Every optional column names a real option, documented with the column's name.
    specs = {spec.name: spec for spec in OPTION_SPECS}
    for column in OPTIONAL_COLUMNS:
        assert column.option in specs and column.name in specs[column.option].doc


def test_the_options_add_the_optional_columns_after_the_system_fields():
    raw = {"endpoint": "http://h:1", "prompts": "/p"}
    assert added_columns(Options.parse(raw)) == ()
    assert added_columns(Options.parse({**raw, "repairAttempts": "0"})) == ()
    both = Options.parse({**raw, "validateSchema": "true", "repairAttempts": "2"})
    assert added_columns(both) == ("_schema_violations", "_attempts")
    only = Options.parse({**raw, "repairAttempts": "1"})
    schema = query_schema(Query(options=only, json_schema=SCHEMA))
    assert schema.names[-len(SYSTEM_FIELDS) - 1 :] == [*SYSTEM_COLUMNS, "_attempts"]
    assert "parsed" in schema.names
    with pytest.raises(ValueError, match="_nope"):
        output_schema(added=["_nope"])


def test_a_users_response_schema_gets_the_parsers_system_columns_from_the_registry():
    from pyspark.sql.types import StructField, StructType

    schema = dspark_json.response_schema(schema=StructType([StructField("id", StringType())]))
    assert schema.names == ["id", *PARSER_COLUMNS]
    assert all(f.dataType == StringType() for f in schema.fields)


def test_the_pipeline_fills_every_column_the_parser_does_not():
    # A registry entry without its filler would be a column of nulls, or a KeyError.
    assert set(pipeline._FILLS) == {c.name for c in COLUMNS if c.stage != "parse"}
    assert set(pipeline._FILLS) == pipeline._ADDED


def test_permissive_keeps_all_dropmalformed_drops_malformed_only():
    statuses = ["ok", "not_json", "http_error", "truncated", "empty", "invalid_prompt"]
    assert apply_mode("PERMISSIVE", statuses, describe=str) is None
    keep = apply_mode("DROPMALFORMED", statuses, describe=str)
    assert keep == [True, False, True, False, True, False]


def test_failfast_names_the_first_bad_row_with_the_server_message():
    error = row_error(status=404, type="NotFoundError", message="no model x", attempts=1)
    with pytest.raises(
        RecordError,
        match=r"request for row 1 failed after 1 attempt\(s\): "
        r"HTTP 404, NotFoundError: no model x",
    ):
        apply_mode(
            "FAILFAST",
            ["ok", "http_error", "not_json"],
            describe=lambda i: f"row {i}",
            errors={1: error},
        )
    with pytest.raises(RecordError, match=r"row 2 is malformed \(not_json: prose\)"):
        apply_mode(
            "FAILFAST",
            ["ok", "ok", "not_json"],
            describe=lambda i: f"row {i}",
            detail=lambda i: ": prose",
        )


def test_complete_json_cut_by_length_is_ok_and_incomplete_json_is_truncated():
    bodies = [body('{"a": 1}', finish="length"), body('{"a": 1', finish="length")]
    for backend in ("cpu",):
        table = dspark_json.parse_responses(bodies, response_format=SCHEMA, backend=backend)
        assert table.column("_status").to_pylist() == ["ok", "truncated"]
        assert table.column("parsed").to_pylist()[0] == {"a": 1}
    reference = ReferenceParser(dspark_json.response_schema(response_format=SCHEMA))
    assert reference.parse(bodies).column("_status").to_pylist() == ["ok", "truncated"]


def test_parse_responses_dropmalformed_and_failfast():
    bodies = [body('{"a": 1}'), body("just prose"), "{not json", body('{"a": 2}')]
    kept = dspark_json.parse_responses(bodies, response_format=SCHEMA, mode="DROPMALFORMED")
    assert [p["a"] for p in kept.column("parsed").to_pylist()] == [1, 2]
    with pytest.raises(RecordError, match=r"response body 1 is malformed \(not_json: "):
        dspark_json.parse_responses(bodies, response_format=SCHEMA, mode="FAILFAST")
    with pytest.raises(dspark_json.OptionError, match="mode='LAX' is not a mode"):
        dspark_json.parse_responses(bodies, mode="LAX")  # type: ignore[arg-type]
    assert isinstance(dspark_json.parse_responses(pa.array([], pa.string())), pa.Table)
