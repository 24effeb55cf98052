"""Spark 4.0's Rows (what its stream writer gets) back into Arrow, values as they were."""

import time
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.compat import to_arrow_schema
from dspark_json.delta.files import utc_timestamps
from dspark_json.delta.from_rows import batches_from_rows

SCHEMA = StructType(
    [
        StructField("id", StringType()),
        StructField("at", TimestampType()),
        StructField(
            "parsed",
            StructType([StructField("n", IntegerType()), StructField("when", TimestampType())]),
        ),
        StructField("tags", ArrayType(StringType())),
        StructField("counts", MapType(StringType(), IntegerType())),
        StructField("blob", BinaryType()),
    ]
)


def test_rows_become_batches_with_timestamps_back_in_utc(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")  # the worker's zone: not UTC
    time.tzset()
    try:
        instant = datetime(2026, 3, 1, 12, 30, 0, 123456, tzinfo=UTC)
        local = instant.astimezone().replace(tzinfo=None)  # what Spark 4.0 puts in a Row
        assert local.hour != 12
        rows = [
            Row(
                id="a",
                at=local,
                parsed=Row(n=1, when=local),
                tags=["x"],
                counts={"k": 2},
                blob=bytearray(b"\x00\x01"),
            ),
            Row(id="b", at=None, parsed=None, tags=None, counts=None, blob=None),
        ] * 3
        arrow = utc_timestamps(to_arrow_schema(SCHEMA))
        batches = list(batches_from_rows(iter(rows), SCHEMA, arrow, size=4))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert [b.num_rows for b in batches] == [4, 2]
    table = pa.Table.from_batches(batches)
    assert table.schema == arrow
    first, second = table.to_pylist()[:2]
    assert first["at"] == instant and first["parsed"] == {"n": 1, "when": instant}
    assert first["tags"] == ["x"] and first["counts"] == [("k", 2)] and first["blob"] == b"\x00\x01"
    assert second == {"id": "b"} | {k: None for k in second if k != "id"}
