"""The record mode's words to the user: what FAILFAST says about a malformed row, what
DROPMALFORMED counts in the log, and JSON read from elsewhere."""

import logging

import pytest

from dspark_json.errors import RecordError
from dspark_json.rows import MAX_NESTING, apply_mode, exceeds_nesting, load_json


def test_failfast_on_a_malformed_row_says_how_to_keep_or_drop_it():
    with pytest.raises(RecordError) as caught:
        apply_mode("FAILFAST", ["ok", "truncated"], describe=lambda i: f"custom_id 'r{i}'")
    assert str(caught.value) == (
        "mode=FAILFAST: custom_id 'r1' is malformed (truncated). Use mode=PERMISSIVE to keep "
        "such rows with _corrupt_record, or DROPMALFORMED to drop them."
    )


def test_failfast_on_a_schema_mismatch_names_the_value_and_where_permissive_keeps_it():
    with pytest.raises(RecordError) as caught:
        apply_mode(
            "FAILFAST",
            ["ok", "schema_mismatch"],
            describe=lambda i: f"custom_id 'r{i}'",
            detail=lambda i: ': parsed.score is double, the answer holds "high"',
        )
    assert str(caught.value) == (
        "mode=FAILFAST: custom_id 'r1' is malformed (schema_mismatch: parsed.score is double, "
        'the answer holds "high"). Use mode=PERMISSIVE to keep such rows with _rescued_data, '
        "or DROPMALFORMED to drop them."
    )


def test_dropmalformed_counts_what_it_dropped_in_the_log(caplog):
    caplog.set_level(logging.INFO, logger="dspark_json")
    statuses = ["ok", "not_json", "http_error", "corrupt_content", "empty"]
    assert apply_mode("DROPMALFORMED", statuses, describe=str) == [
        True, False, True, False, True,
    ]  # fmt: skip
    assert "mode=DROPMALFORMED dropped 2 malformed row(s) of 5" in caplog.text
    caplog.clear()
    assert apply_mode("DROPMALFORMED", ["ok", "http_error"], describe=str) == [True, True]
    assert "dropped" not in caplog.text


def test_json_from_elsewhere_takes_json_loads_options_and_refuses_deep_nesting():
    assert load_json('"a\tb"', strict=False) == "a\tb"
    with pytest.raises(ValueError, match="Invalid control character"):
        load_json('"a\tb"')
    assert load_json(b"[" * MAX_NESTING + b"]" * MAX_NESTING) is not None
    with pytest.raises(ValueError, match=f"nested more than {MAX_NESTING} levels deep"):
        load_json("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1))


def test_nesting_is_measured_outside_strings_up_to_the_limit_itself():
    deep = "[" * MAX_NESTING + "]" * (MAX_NESTING - 1) + ",[]" + "]"  # more brackets, same depth
    assert exceeds_nesting(deep) is False
    assert exceeds_nesting("[" + deep + "]") is True
    assert exceeds_nesting('"[[[["', limit=0) is False
    assert exceeds_nesting('["\ud800", "[{"]', limit=1) is False  # a lone surrogate, as json writes
