"""A streaming job for the exactly-once tests, run as its own process so that it can be killed.

    python tests/spark/stream_job.py --url URL --work DIR [--crash after-journal|after-commit
                                     --crash-batch N] [--fail-task-once] [--repair-attempts N]
                                     [--cache PATH]

Prompts in DIR/in -> dspark-json (journal DIR/journal, 20 prompts per batch) -> the dspark-delta
sink into DIR/table (the tasks write the data files, the driver commits), checkpoint
DIR/checkpoint, trigger availableNow. ``--crash`` kills this process (SIGKILL, as an OOM killer or
a lost node would) at that point of batch N, from the sink's commit on the driver: after the
tasks read the batch (its answers are journaled) and wrote its data files, but before the Delta
commit; or after the Delta commit, before Spark records the batch as done. ``--fail-task-once``
makes the first task fail once after its rows were read, and lets Spark retry it (local[2,2]).
``--repair-attempts`` re-asks wrong answers (with validateSchema; maxTokens 32, metrics in
DIR/metrics). ``--cache PATH`` asks at temperature 0 with dedupe and the response cache at
PATH.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dspark_json
from dspark_json.compat import start
from dspark_json.delta.sink import DeltaSink, DeltaStreamWriter


class CrashingWriter(DeltaStreamWriter):
    """The sink's writer, with a kill -9 of the driver process around the commit of one batch.

    The commit runs in a Python worker of the driver; the point and the driver's pid reach it
    through the environment, which the JVM and its Python workers inherit."""

    def commit(self, messages, batchId):
        point, _, batch = os.environ.get("STREAM_JOB_CRASH", "").partition(":")
        crash = bool(batch) and int(batch) == batchId
        if crash and point == "after-journal":
            _kill_driver()
        super().commit(messages, batchId)
        if crash and point == "after-commit":
            _kill_driver()


class CrashingSink(DeltaSink):
    def streamWriter(self, schema, overwrite):
        return CrashingWriter(super().streamWriter(schema, overwrite).target)


def _kill_driver() -> None:
    os.kill(int(os.environ["STREAM_JOB_PID"]), signal.SIGKILL)
    time.sleep(60)  # never answer the JVM, which exits when its driver process is gone
    os._exit(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--crash", choices=["after-journal", "after-commit"])
    parser.add_argument("--crash-batch", type=int, default=0)
    parser.add_argument("--fail-task-once", action="store_true")
    parser.add_argument("--repair-attempts", type=int, default=0, help="and validateSchema")
    parser.add_argument("--cache", type=Path, help="temperature 0, dedupe and this cache")
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, udf

    os.environ["STREAM_JOB_PID"] = str(os.getpid())
    if args.crash:
        os.environ["STREAM_JOB_CRASH"] = f"{args.crash}:{args.crash_batch}"
    master = "local[2,2]" if args.fail_task_once else "local[2]"
    # Spark starts the Python workers that plan a data source with PYSPARK_PYTHON, not with
    # spark.pyspark.python: point both at this interpreter (and its packages).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    dspark_json.register(spark)
    spark.dataSource.register(CrashingSink)  # same name: replaces the plain dspark-delta
    repair = {}
    if args.repair_attempts:
        repair = {
            "repairAttempts": str(args.repair_attempts),
            "validateSchema": "true",
            "maxTokens": "32",
            "metrics": str(args.work / "metrics"),
        }
    reuse = {}
    if args.cache:
        reuse = {"temperature": "0", "dedupe": "auto", "cache": str(args.cache)}
    df = (
        spark.readStream.format("dspark-json")
        .option("endpoint", args.url)
        .option("prompts", str(args.work / "in"))
        .option("journal", str(args.work / "journal"))
        .option("maxRecordsPerTrigger", "20")
        .option("partitionSize", "10")
        .option("maxConcurrency", "2")
        .option("adaptiveConcurrency", "false")
        .option(
            "responseFormat",
            '{"type": "object", "properties": {"word": {"type": "string"}, '
            '"n": {"type": "integer"}}, "required": ["word", "n"]}',
        )
        .options(**repair, **reuse)
        .load()
    )
    if args.fail_task_once:
        marker = str(args.work / "failed-once")

        @udf("boolean")
        def fail_once(custom_id: str) -> bool:
            if not os.path.exists(marker):
                Path(marker).touch()
                raise RuntimeError("injected task failure (once)")
            return True

        df = df.filter(fail_once(col("custom_id")))

    writer = df.writeStream.format("dspark-delta").option(
        "checkpointLocation", str(args.work / "checkpoint")
    )
    # availableNow on every Spark (4.0/4.1 run it as repeated runs: dspark_json.compat).
    query = start(writer, {"availableNow": True}, path=str(args.work / "table"))
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
