"""Streaming into Delta on a Spark standalone cluster with 2 executors: the ``dspark-delta`` sink
(the executors write the Parquet files, the driver commits metadata) against the ``foreachBatch``
sink it replaced (each micro-batch collected to the driver with ``toArrow()`` and written there
with delta-rs), side by side in one run, on one cluster.

    .venv/bin/python benchmarks/delta_sink.py            # a few minutes; results/delta_sink.*
    .venv/bin/python benchmarks/delta_sink.py --smoke    # tiny sizes

The rows are dspark-json's own (envelope, typed ``parsed``, ``_status``...): the seeded review
corpus of ``parser_throughput.py`` parsed once by the source (option ``responses``) and kept as
Parquet files, which each run streams (``maxFilesPerTrigger``) so that neither the model nor the
parser hides the sink's cost. Each run starts a fresh query on a fresh table (query start
included, as in ``report.py``); the contenders alternate, after one warm-up run each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parser_throughput import CONTENT_SCHEMA, corpus, machine

import dspark_json
from dspark_json.dev.cluster import StandaloneCluster

RESULTS = Path(__file__).parent / "results"
NEW_SINK = "dspark-delta sink (executors write)"
FOREACH_BATCH = "foreachBatch + toArrow (driver writes)"
HAND_OVER = "reference: Arrow to executor Python, nothing written"


class ForeachBatchSink:
    """The sink before the dspark-delta format: materialise the batch on the driver, write it
    there with delta-rs in one commit carrying (query id, batch id); skip a committed batch."""

    def __init__(self, path: str, checkpoint: str) -> None:
        self.path = path
        self.checkpoint = checkpoint
        self.driver_bytes = 0

    def __call__(self, batch: Any, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
        from deltalake.exceptions import TableNotFoundError

        from dspark_json.delta.files import utc_timestamps

        app_id = "dspark-json:" + json.loads(Path(self.checkpoint, "metadata").read_text())["id"]
        try:
            done = DeltaTable(self.path).transaction_version(app_id)
        except TableNotFoundError:
            done = None
        if done is not None and done >= batch_id:
            return
        table = batch.toArrow()
        self.driver_bytes += table.nbytes
        table = table.cast(utc_timestamps(table.schema))
        write_deltalake(
            self.path,
            table,
            mode="append",
            schema_mode="merge",
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=batch_id)]
            ),
        )


def write_input(directory: Path, rows: int, files: int) -> int:
    """Write ``rows`` recorded bodies into ``files`` JSONL files; return their bytes."""
    directory.mkdir(parents=True)
    bodies = corpus(rows)
    per_file = -(-rows // files)
    size = 0
    for i in range(files):
        text = "\n".join(bodies[i * per_file : (i + 1) * per_file]) + "\n"
        (directory / f"part-{i:03d}.jsonl").write_text(text, encoding="utf-8")
        size += len(text.encode())
    return size


def prepare(spark: Any, source: Path, prepared: Path, files: int) -> Any:
    """The source's rows for the recorded answers, as ``files`` Parquet files; their schema."""
    rows = (
        spark.read.format("dspark-json")
        .option("responses", str(source))
        .option("responseFormat", json.dumps(CONTENT_SCHEMA))
        .load()
    )
    rows.repartition(files).write.parquet(str(prepared))
    return spark.read.parquet(str(prepared)).schema


def run_once(
    spark: Any, contender: str, prepared: tuple[Path, Any], work: Path, files_per_batch: int
) -> dict:
    from deltalake import DeltaTable

    directory, schema = prepared
    df = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", str(files_per_batch))
        .parquet(str(directory))
    )
    table, checkpoint = str(work / "table"), str(work / "checkpoint")
    started = time.perf_counter()
    driver_bytes = 0
    counted: list[int] = []
    sink: Callable[[Any, int], None]
    if contender == NEW_SINK:
        query = dspark_json.write_delta(
            df, table, checkpoint=checkpoint, trigger={"availableNow": True}
        )
    else:
        if contender == FOREACH_BATCH:
            sink = ForeachBatchSink(table, checkpoint)
        else:  # HAND_OVER

            def sink(batch: Any, batch_id: int) -> None:
                counts = batch.mapInArrow(_count_rows, "n long").collect()
                counted.append(sum(r.n for r in counts))

        query = (
            df.writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    query.awaitTermination()
    if contender == FOREACH_BATCH:
        driver_bytes = sink.driver_bytes  # type: ignore[attr-defined]
    seconds = time.perf_counter() - started
    add_batch = [p.durationMs.get("addBatch", 0) for p in query.recentProgress if p.numInputRows]
    figure = {
        "contender": contender,
        "seconds": seconds,
        "batches": len(add_batch),
        "median_add_batch_ms": statistics.median(add_batch),
        "rows_to_driver_mb": driver_bytes / 1e6,
    }
    if contender == HAND_OVER:
        figure |= {"rows": sum(counted), "commits": 0, "files": 0}
    else:
        delta = DeltaTable(table)
        figure |= {
            "rows": delta.count(),
            "commits": delta.version() + 1,
            "files": len(delta.file_uris()),
        }
    figure["rows_per_s"] = figure["rows"] / seconds
    return figure


def _count_rows(batches: Any) -> Any:
    import pyarrow as pa

    yield pa.record_batch({"n": [sum(b.num_rows for b in batches)]})


def measure(
    rows: int, files: int, files_per_batch: int, rounds: int
) -> tuple[list[dict[str, Any]], int]:
    from pyspark.sql import SparkSession

    contenders = [NEW_SINK, FOREACH_BATCH, HAND_OVER]
    figures: list[dict[str, Any]] = []
    input_bytes = 0
    with tempfile.TemporaryDirectory(prefix="delta-sink-bench-") as tmp:
        root = Path(tmp)
        source = root / "in"
        input_bytes = write_input(source, rows, files)
        os.environ["PYSPARK_PYTHON"] = sys.executable
        with StandaloneCluster(root / "spark", cores=2, memory="4g") as cluster:
            spark = (
                SparkSession.builder.master(cluster.url)
                .appName("dspark-json delta sink benchmark")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.driver.memory", "2g")
                .config("spark.executor.cores", "1")
                .config("spark.cores.max", "2")
                .config("spark.executor.memory", "1500m")
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.pyspark.python", sys.executable)
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("WARN")
            _wait_for_executors(spark, 2)
            dspark_json.register(spark)
            prepared = (root / "prepared", prepare(spark, source, root / "prepared", files))
            for i in range(rounds + 1):  # round 0: warm-up (Python workers, numba, JIT)
                for contender in contenders if i % 2 == 0 else contenders[::-1]:
                    work = root / f"run-{i}-{contenders.index(contender)}"
                    figure = run_once(spark, contender, prepared, work, files_per_batch)
                    print(
                        f"round {i} {contender:<40} {figure['seconds']:7.1f}s "
                        f"{figure['rows_per_s']:9,.0f} rows/s",
                        flush=True,
                    )
                    if i > 0:
                        figures.append(figure)
            spark.stop()
    return figures, input_bytes


def _wait_for_executors(spark: Any, count: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    sc = spark.sparkContext
    while sc._jsc.sc().getExecutorMemoryStatus().size() < count + 1:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} executors did not register in {timeout:.0f} s")
        time.sleep(0.5)


def summarise(figures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for contender in (NEW_SINK, FOREACH_BATCH, HAND_OVER):
        runs = [f for f in figures if f["contender"] == contender]
        if not runs:
            continue
        out.append(
            {
                "contender": contender,
                "runs": len(runs),
                "rows": runs[0]["rows"],
                "median_seconds": statistics.median(f["seconds"] for f in runs),
                "median_rows_per_s": statistics.median(f["rows_per_s"] for f in runs),
                "best_rows_per_s": max(f["rows_per_s"] for f in runs),
                "median_add_batch_ms": statistics.median(f["median_add_batch_ms"] for f in runs),
                "commits": runs[0]["commits"],
                "files": runs[0]["files"],
                "rows_to_driver_mb": runs[0]["rows_to_driver_mb"],
            }
        )
    return out


def markdown(meta: dict[str, Any], summary: list[dict[str, Any]]) -> str:
    base = next(s for s in summary if s["contender"] == FOREACH_BATCH)["median_rows_per_s"]
    lines = [
        f"Delta sink benchmark, {meta['date']}, {meta['cpu_cores']} cores, Python "
        f"{meta['python']}, pyspark {meta['pyspark']}. Command: `{meta['command']}`",
        "",
        f"Spark standalone cluster on this machine (Master, Worker, 2 executors of 1 core); "
        f"{meta['rows']:,} rows of dspark-json output (the review corpus, {meta['input_mb']:.0f} "
        f"MB of bodies, parsed once with option `responses` and kept as {meta['files']} Parquet "
        f"files) streamed into a new Delta table, trigger availableNow, "
        f"maxFilesPerTrigger={meta['files_per_batch']} ({meta['batch_rows']:,} rows a "
        f"micro-batch); {meta['rounds']} runs each after a warm-up, alternating; query start "
        "included.",
        "",
        "| sink | runs | median s | median rows/s | best rows/s | vs foreachBatch | ms per "
        "micro-batch (addBatch) | commits | files | rows to the driver |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| {s['contender']} | {s['runs']} | {s['median_seconds']:.1f} | "
            f"{s['median_rows_per_s']:,.0f} | {s['best_rows_per_s']:,.0f} | "
            f"{s['median_rows_per_s'] / base:.2f}x | {s['median_add_batch_ms']:,.0f} | "
            f"{s['commits']} | {s['files']} | "
            f"{s['rows_to_driver_mb']:.0f} MB |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--files-per-batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.files, args.rounds = 2_000, 4, 1
    figures, input_bytes = measure(args.rows, args.files, args.files_per_batch, args.rounds)
    summary = summarise(figures)
    meta = machine() | {
        "command": " ".join(["python", "benchmarks/delta_sink.py", *sys.argv[1:]]),
        "rows": args.rows,
        "input_mb": input_bytes / 1e6,
        "files": args.files,
        "files_per_batch": args.files_per_batch,
        "batch_rows": args.rows * args.files_per_batch // args.files,
        "rounds": args.rounds,
    }
    report = markdown(meta, summary)
    print(report)
    if not args.smoke:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "delta_sink.md").write_text(report, encoding="utf-8")
        payload = {"machine": meta, "summary": summary, "runs": figures}
        (RESULTS / "delta_sink.json").write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
