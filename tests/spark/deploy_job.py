"""The driver of the deployment tests, run as its own process (a Python process holds one
SparkContext, and a Spark Connect client changes pyspark's mode for the whole process).

    python tests/spark/deploy_job.py cluster --master spark://... --url SIM --work DIR
    python tests/spark/deploy_job.py connect --remote sc://... --url SIM --work DIR

``cluster``: on a standalone cluster (2 executors of 1 core, ``spark.driver.maxResultSize=1m``),
stream DIR/in through dspark-json (the key from ``apiKeyEnv``, which reaches the executors only
through ``spark.executorEnv``) into the Delta table DIR/table with ``write_delta``; then replay the
last batch as a restart after its Delta commit would; then, as the control, collect the table's
rows to the driver (what a ``foreachBatch`` sink's ``toArrow()`` does), which must fail.
``connect``: from a Spark Connect client, register the formats, read DIR/in as a batch, stream it
into DIR/table, and write a batch DataFrame into DIR/batch-table.

The last line of stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dspark_json

KEY_ENV = "DSPARK_TEST_API_KEY"
SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"word": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["word", "n"],
    }
)


def reader(spark, url: str, work: Path, **options: str):
    stream = spark.readStream.format("dspark-json")
    for key, value in {
        "endpoint": url,
        "prompts": str(work / "in"),
        "journal": str(work / "journal"),
        "responseFormat": SCHEMA,
        **options,
    }.items():
        stream = stream.option(key, value)
    return stream.load()


def progress(query) -> list[dict[str, int]]:
    return [{"batchId": p.batchId, "numInputRows": p.numInputRows} for p in query.recentProgress]


def cluster(args: argparse.Namespace) -> dict[str, object]:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .appName("dspark-json cluster test")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.executor.memory", "768m")
        .config("spark.driver.maxResultSize", "1m")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .config(f"spark.executorEnv.{KEY_ENV}", os.environ[KEY_ENV])
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    deadline = time.monotonic() + 180
    while status.size() < 3:  # the driver and two executors
        if time.monotonic() > deadline:
            raise RuntimeError(f"executors did not register: {status}")
        time.sleep(0.5)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    dspark_json.register(spark)
    options = {"apiKeyEnv": KEY_ENV, "maxRecordsPerTrigger": "3000", "partitionSize": "500"}
    table, checkpoint = str(args.work / "table"), args.work / "checkpoint"
    first = dspark_json.write_delta(
        reader(spark, args.url, args.work, **options),
        table,
        checkpoint=str(checkpoint),
        trigger={"availableNow": True},
    )
    first.awaitTermination()
    # As if the driver had died after batch 1's Delta commit, before Spark recorded it.
    for name in ("1", ".1.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    replay = dspark_json.write_delta(
        reader(spark, args.url, args.work, **options),
        table,
        checkpoint=str(checkpoint),
        trigger={"availableNow": True},
    )
    replay.awaitTermination()
    try:
        spark.read.parquet(table).toArrow()
        control = ""
    except Exception as exc:  # the rows do not fit spark.driver.maxResultSize
        lines = str(exc).splitlines()
        control = next((line for line in lines if "maxResultSize" in line), lines[0])
    executors = status.size() - 1
    spark.stop()
    return {
        "executors": executors,
        "first": progress(first),
        "replay": progress(replay),
        "control_error": control,
    }


def connect(args: argparse.Namespace) -> dict[str, object]:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(args.remote).getOrCreate()
    dspark_json.register(spark)
    batch = (
        spark.read.format("dspark-json")
        .option("endpoint", args.url)
        .option("prompts", str(args.work / "in"))
        .option("responseFormat", SCHEMA)
        .load()
    )
    rows = [r.asDict(recursive=True) for r in batch.select("custom_id", "_status").collect()]
    query = dspark_json.write_delta(
        reader(spark, args.url, args.work, maxRecordsPerTrigger="20"),
        str(args.work / "table"),
        checkpoint=str(args.work / "checkpoint"),
        trigger={"availableNow": True},
    )
    query.awaitTermination()
    written = progress(query)
    spark.createDataFrame([(1, "a"), (2, "b")], "n int, s string").write.format(
        "dspark-delta"
    ).mode("append").save(str(args.work / "batch-table"))
    spark.stop()
    return {"batch_rows": rows, "stream": written}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["cluster", "connect"])
    parser.add_argument("--master")
    parser.add_argument("--remote")
    parser.add_argument("--url", required=True)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    summary = cluster(args) if args.mode == "cluster" else connect(args)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
