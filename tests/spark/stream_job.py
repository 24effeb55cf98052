"""A streaming job for the exactly-once tests, run as its own process so that it can be killed.

    python tests/stream_job.py --url URL --work DIR [--crash after-journal|after-commit
                               --crash-batch N] [--fail-task-once]

Prompts in DIR/in -> dspark-json (journal DIR/journal, 20 prompts per batch) -> Delta DIR/table,
checkpoint DIR/checkpoint, trigger availableNow. ``--crash`` kills this process (SIGKILL, as an
OOM killer or a lost node would) at that point of batch N: after the batch was read (so its
answers are journaled) but before the Delta commit, or after the Delta commit but before Spark
records the batch as done. ``--fail-task-once`` makes the first task fail once after its rows
were read, and lets Spark retry it (local[2,2]).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dspark_json
from dspark_json.delta import _DeltaBatchWriter


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--crash", choices=["after-journal", "after-commit"])
    parser.add_argument("--crash-batch", type=int, default=0)
    parser.add_argument("--fail-task-once", action="store_true")
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, udf

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

    delta = _DeltaBatchWriter(str(args.work / "table"), str(args.work / "checkpoint"))

    def sink(batch, batch_id: int) -> None:
        if args.crash == "after-journal" and batch_id == args.crash_batch:
            batch.toArrow()  # the source reads the batch, and journals its answers
            os.kill(os.getpid(), signal.SIGKILL)
        delta(batch, batch_id)
        if args.crash == "after-commit" and batch_id == args.crash_batch:
            os.kill(os.getpid(), signal.SIGKILL)

    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(args.work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
