"""The ``dspark-delta`` reader's half that runs without Spark: the snapshot (versions, options),
the files a partition filter keeps, a file read in the table's schema."""

from pathlib import Path

import pyarrow as pa
import pyspark.sql.datasource as datasource
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from pyspark.sql.types import LongType, StringType, StructField, StructType

from dspark_json.delta.reader import DeltaTableReader, read_file, read_table, snapshot
from dspark_json.errors import OptionError


def by_id(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.fixture
def widened(tmp_path: Path) -> str:
    """A table partitioned by ``lang`` whose struct ``p`` gained field ``b`` in version 1."""
    uri = str(tmp_path / "t")
    first = pa.table({"id": [1, 2, 3], "lang": ["en", "de", None], "p": [{"a": 1}] * 3})
    write_deltalake(uri, first, partition_by=["lang"])
    second = pa.table({"id": [4], "lang": ["en"], "p": [{"a": 2, "b": "x"}]})
    write_deltalake(uri, second, partition_by=["lang"], mode="append", schema_mode="merge")
    return uri


def test_rows_equal_what_delta_rs_reads_and_older_files_get_nulls(widened):
    ours = read_table(widened)
    theirs = QueryBuilder().register("t", DeltaTable(widened)).execute("select * from t")
    assert by_id(ours) == by_id(pa.table(theirs.read_all()))
    assert by_id(ours)[0] == {"id": 1, "lang": "en", "p": {"a": 1, "b": None}}
    assert by_id(read_table(widened, version=0)) == [
        {"id": 1, "p": {"a": 1}, "lang": "en"},
        {"id": 2, "p": {"a": 1}, "lang": "de"},
        {"id": 3, "p": {"a": 1}, "lang": None},
    ]


@pytest.mark.parametrize(
    ("kind", "column", "value", "langs"),
    [
        ("EqualTo", "lang", "en", ["en", "en"]),
        ("In", "lang", ("de", "fr"), ["de"]),
        ("IsNull", "lang", None, [None]),
        ("GreaterThan", "lang", "da", ["de", "en", "en"]),
        ("EqualTo", "id", 1, [None, "de", "en", "en"]),  # not a partition column: all files
    ],
    ids=["equal", "in", "is-null", "greater", "data-column"],
)
def test_partition_filters_select_files_and_all_go_back_to_spark(
    widened, kind, column, value, langs
):
    if not hasattr(datasource, kind):
        pytest.skip("Spark 4.0 has no filters for Python readers")
    make = getattr(datasource, kind)
    f = make((column,)) if value is None else make((column,), value)
    table = snapshot({"path": widened}, format_name="dspark-delta")
    schema = StructType([StructField("id", LongType()), StructField("lang", StringType())])
    reader = DeltaTableReader(table, schema)
    assert list(reader.pushFilters([f])) == [f]  # Spark still evaluates each
    kept = [dict(p.partition_values)["lang"] for p in reader.partitions()]
    assert sorted(kept, key=str) == sorted(langs, key=str)


def test_a_narrower_schema_reads_only_its_columns(widened):
    table = snapshot({"path": widened}, format_name="dspark-delta")
    reader = DeltaTableReader(table, StructType([StructField("lang", StringType())]))
    target = pa.schema([pa.field("lang", pa.string())])
    rows = [r for p in reader.partitions() for r in read_file(p, target).to_pylist()]
    assert sorted(rows, key=lambda r: r["lang"] or "") == [
        {"lang": None},
        {"lang": "de"},
        {"lang": "en"},
        {"lang": "en"},
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"versionAsOf": "7"}, r"versionAsOf='7': the Delta table .* has no such version"),
        ({"versionAsOf": "-1"}, r"'versionAsOf' must be a table version .* got '-1'"),
        ({"timestampAsOf": "yesterday"}, r"'timestampAsOf' must be an ISO 8601 time"),
        ({"versionAsOf": "0", "timestampAsOf": "2026-01-01"}, "not both"),
        (
            {"versionAsof": "0", "versoinAsOf": "1"},
            r"no option 'versoinasof' \(as Spark passes it, lowercased\)\. Did you mean",
        ),
    ],
    ids=["missing-version", "negative", "bad-time", "both", "typo"],
)
def test_bad_read_options_name_the_option_and_the_fix(widened, options, message):
    with pytest.raises(OptionError, match=message):
        snapshot({"path": widened, **options}, format_name="dspark-delta")


def test_no_table_and_no_path_say_what_to_give(tmp_path):
    with pytest.raises(OptionError, match=r"no Delta table at .*Check the path given to \.load"):
        snapshot({"path": str(tmp_path)}, format_name="dspark-delta")
    with pytest.raises(OptionError, match=r"needs the table's location: \.load\(path\)"):
        snapshot({}, format_name="dspark-delta")


def test_an_empty_table_reads_as_one_empty_partition(tmp_path):
    uri = str(tmp_path / "e")
    write_deltalake(uri, pa.table({"id": pa.array([], pa.int64())}))
    table = snapshot({"path": uri}, format_name="dspark-delta")
    reader = DeltaTableReader(table, StructType([StructField("id", LongType())]))
    (only,) = reader.partitions()
    assert [b.num_rows for b in reader.read(only)] == [0]
    assert read_table(uri).num_rows == 0
