"""What the row contract says (docs/reference/row-contract.md), held to the parser: when a
row is ``ok``, where a value that did not fit went (its row ``schema_mismatch``), which content
is ``corrupt_content``; and
what ``parse_responses`` returns (no ``_error``: it sends no request)."""

import json

import pytest

import dspark_json

SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number"}, "label": {"type": "string"}},
    "required": ["score"],
}


def body(content: str) -> str:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}}
    return json.dumps(
        {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    )


@pytest.mark.parametrize(
    ("content", "status", "parsed", "rescued"),
    [
        ("{}", "ok", {"score": None, "label": None}, None),
        (
            '{"score": "high"}',
            "schema_mismatch",
            {"score": None, "label": None},
            {"parsed.score": "high"},
        ),
        ('{"score": 1, "why": "x"}', "ok", {"score": 1.0, "label": None}, {"parsed.why": "x"}),
        ('{"score": 1', "corrupt_content", None, None),
        ("[1, 2]", "corrupt_content", None, None),
        ('"text"', "corrupt_content", None, None),
    ],
    ids=["empty-object", "does-not-fit", "unknown-field", "incomplete", "array", "string"],
)
def test_ok_means_json_that_fits_and_misfits_go_to_rescued(content, status, parsed, rescued):
    (row,) = dspark_json.parse_responses([body(content)], response_format=SCHEMA).to_pylist()
    assert row["_status"] == status and row["parsed"] == parsed
    assert (json.loads(row["_rescued_data"]) if row["_rescued_data"] else None) == rescued


def test_parse_responses_has_the_response_columns_and_no_error_column():
    table = dspark_json.parse_responses([body("{}"), "garbage", None], response_format=SCHEMA)
    assert "_error" not in table.column_names and "custom_id" not in table.column_names
    assert {"parsed", "_status", "_rescued_data", "_corrupt_record"} <= set(table.column_names)
    assert table.column("_status").to_pylist() == ["ok", "corrupt_envelope", None]


def test_a_value_that_does_not_fit_is_one_warning_naming_the_field_type_and_value(caplog):
    bodies = [body('{"score": "high"}'), body('{"score": "low"}'), body('{"score": 0.5}')]
    with caplog.at_level("WARNING", logger="dspark_json"):
        table = dspark_json.parse_responses(bodies, response_format=SCHEMA)
    assert table.column("_status").to_pylist() == ["schema_mismatch", "schema_mismatch", "ok"]
    (warning,) = [r for r in caplog.records if "schema_mismatch" in r.getMessage()]
    assert warning.levelname == "WARNING"
    assert 'parsed.score is double, the answer holds "high" (in response body 0' in (
        warning.getMessage()
    )
    assert "2 of 3 row(s)" in warning.getMessage()
