"""Values that do not fit their field of ``parsed``, found in ``_rescued_data``
(dspark_json/schema/fit.py): which rescued keys are misfits (a field the type has), which are
drift (a field it does not know), and the one WARN per query."""

import json
import logging

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from dspark_json.schema.fit import Misfit, field_type, find_misfits, mark_misfits, warn_once

PARSED = StructType(
    [
        StructField("a", LongType()),
        StructField("p", StructType([StructField("n", LongType())])),
        StructField("xs", ArrayType(StructType([StructField("q", LongType())]))),
        StructField("m", MapType(StringType(), LongType())),
        StructField("x.y", DoubleType()),
    ]
)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("parsed.a", LongType()),
        ("parsed.p.n", LongType()),
        ("parsed.p", PARSED["p"].dataType),
        ("parsed.xs[1].q", LongType()),
        ("parsed.m.k", LongType()),
        ("parsed.x.y", DoubleType()),
        ("parsed.extra", None),  # drift: a field the type does not know
        ("parsed.p.zz", None),
        ("parsed.xs.q", None),
        ("choices[0].message.parsed.a", None),
        ("parsedx", None),
    ],
)
def test_a_rescued_key_is_a_misfit_where_it_names_a_field_of_parsed(key, expected):
    assert field_type(key, PARSED) == expected


def test_ok_rows_holding_a_misfit_become_schema_mismatch():
    rescued = pa.array(
        [
            json.dumps({"parsed.extra": 1}),
            json.dumps({"parsed.a": "x", "choices": []}),
            None,
            json.dumps({"parsed.xs[0].q": 1.5}),
            json.dumps({"parsed.a": "y"}),
        ]
    )
    found = find_misfits(rescued, PARSED)
    assert sorted(found) == [1, 3, 4]
    assert found[3] == Misfit("parsed.xs[0].q", LongType(), 1.5)
    assert found[3].field == "parsed.xs[].q"
    statuses = ["ok", "ok", "ok", "ok", "truncated"]
    marked = mark_misfits(statuses, found)
    assert statuses == ["ok", "schema_mismatch", "ok", "schema_mismatch", "truncated"]
    assert sorted(marked) == [1, 3]


def test_one_warning_per_query_names_the_field_type_and_a_value(caplog):
    marked = {2: Misfit("parsed.a", LongType(), "high"), 5: Misfit("parsed.a", LongType(), "x")}
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        warn_once("query-1", marked, lambda row: f"row {row}", rows=8)
        warn_once("query-1", marked, lambda row: f"row {row}", rows=8)
    (record,) = caplog.records
    assert record.levelname == "WARNING"
    assert 'parsed.a is bigint, the answer holds "high" (in row 2; string fits it)' in (
        record.getMessage()
    )
    assert "2 of 8 row(s)" in record.getMessage()


@pytest.mark.parametrize(
    ("value", "fits"), [(2**63, "decimal(38,0)"), (10**40, "double"), (-(2**64), "decimal(38,0)")]
)
def test_a_whole_number_past_bigint_is_told_a_type_that_holds_it(caplog, value, fits):
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        warn_once(("past", value), {0: Misfit("parsed.n", LongType(), value)}, str, rows=1)
    assert f"; {fits} fits it)" in caplog.records[0].getMessage()


def test_with_the_rescued_keys_at_hand_only_rows_holding_a_misfit_key_are_read():
    rescued = pa.array(
        [json.dumps({"parsed.extra": 1}), json.dumps({"parsed.ab": 2, "parsed.a": "x"})]
    )
    assert find_misfits(rescued, PARSED, keys=["parsed.extra"]) == {}  # drift alone: none read
    found = find_misfits(rescued, PARSED, keys=["parsed.extra", "parsed.ab", "parsed.a"])
    assert found == {1: Misfit("parsed.a", LongType(), "x")}
