"""``spark.read.format("dspark-delta")``: what the sink wrote reads back in Spark, with the rows
delta-rs sees, through Spark SQL, at an older version, and with partition pruning."""

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql.datasource import DataSourceReader

from tests.helpers import write_prompts
from tests.spark.test_delta import stream

pytestmark = pytest.mark.spark

#: Spark 4.1 and later offer a Python reader the query's filters.
PUSHDOWN = hasattr(DataSourceReader, "pushFilters")


def delta_rs_rows(path: str, columns: str) -> list[tuple]:
    """The rows as delta-rs's own engine (DataFusion) reads them."""
    got = QueryBuilder().register("t", DeltaTable(path)).execute(f"select {columns} from t")
    return sorted(tuple(r.values()) for r in pa.table(got.read_all()).to_pylist())


def test_the_sink_s_table_reads_back_in_spark_sql_at_any_version(spark, simulator, tmp_path):
    rows = [
        {"custom_id": f"q{i:02d}", "prompt": f"Question {i}", "lang": ["en", "de"][i % 2]}
        for i in range(40)
    ]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    stream(spark, simulator.url, tmp_path)  # two micro-batches of 20, partitioned by lang
    path = str(tmp_path / "table")
    assert DeltaTable(path).version() == 1

    back = spark.read.format("dspark-delta").load(path)
    assert back.schema.fieldNames() == DeltaTable(path).schema().to_arrow().names
    columns = "custom_id, lang, _status, parsed.word"
    got = sorted(tuple(r) for r in back.selectExpr(*columns.split(", ")).collect())
    assert got == delta_rs_rows(path, "custom_id, lang, _status, parsed['word']")
    assert len(got) == 40

    back.createOrReplaceTempView("answers")
    counts = spark.sql(
        "SELECT lang, count(*) AS n, count_if(_status = 'ok') AS ok FROM answers GROUP BY lang"
    ).collect()
    assert sorted(tuple(r) for r in counts) == [("de", 20, 20), ("en", 20, 20)]

    first = spark.read.format("dspark-delta").option("versionAsOf", "0").load(path)
    assert first.count() == 20

    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"  # register()
    english = spark.read.format("dspark-delta").load(path).where("lang = 'en'")
    assert sorted(r.custom_id for r in english.collect()) == [
        r["custom_id"] for r in rows if r["lang"] == "en"
    ]
    # One input partition per data file: the files of lang=de are not read (Spark 4.1 and
    # later push filters down to a Python reader; 4.0 reads every file, and Spark filters).
    files = DeltaTable(path).file_uris()
    pruned = sum("lang=en" in f for f in files) if PUSHDOWN else len(files)
    assert english.rdd.getNumPartitions() == pruned and (pruned < len(files) or not PUSHDOWN)

    with pytest.raises(Exception, match=r"versionAsOf='9': the Delta table .* no such version"):
        spark.read.format("dspark-delta").option("versionAsOf", "9").load(path).collect()
