"""The benchmark report: parser throughput by backend and corpus size, and the end-to-end stream
(prompts -> simulator with a set latency -> Delta) by latency and concurrency.

    .venv/bin/python benchmarks/report.py            # about 5 min; writes results/report.*
    .venv/bin/python benchmarks/report.py --smoke    # tiny sizes (the test suite runs it)

Writes ``results/report.md`` (tables), ``results/report.json`` (raw figures and the machine) and
``results/report_parser.png`` / ``results/report_stream.png``. The parser part runs every backend
this machine has (cuDF's GPU backend where a device and cuDF are there) on growing corpora; the
side-by-side comparison against Spark's ``from_json``, a UDF and ``orjson`` is
``parser_throughput.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from parser_throughput import CONTENT_SCHEMA, corpus, interleaved, machine

RESULTS = Path(__file__).parent / "results"


def parser_figures(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    import dspark_json
    from dspark_json.parse import gpu

    backends = ["cpu"] + (["gpu"] if gpu.unavailable_reason() is None else [])
    figures = []
    for rows in sizes:
        bodies = corpus(rows)
        megabytes = sum(len(b.encode()) for b in bodies) / 1e6
        runs = [
            lambda b=backend, x=bodies: dspark_json.parse_responses(
                x, response_format=CONTENT_SCHEMA, backend=b
            )
            for backend in backends
        ]
        for backend, seconds in zip(backends, interleaved(repeat, runs), strict=True):
            figures.append(
                {
                    "backend": backend,
                    "rows": rows,
                    "seconds": seconds,
                    "records_per_s": rows / seconds,
                    "mb_per_s": megabytes / seconds,
                }
            )
            print(f"parser {backend} {rows:>8,} rows {seconds:7.3f}s", flush=True)
    return figures


def stream_source(
    spark: Any, endpoint: str, prompts: Path, schema: str, *, concurrency: int, run: Path
) -> Any:
    """The streaming DataFrame of ``prompts`` through the source (its journal under ``run``)."""
    return (
        spark.readStream.format("dspark-json")
        .option("endpoint", endpoint)
        .option("prompts", str(prompts))
        .option("responseFormat", schema)
        .option("maxConcurrency", str(concurrency))
        .option("journal", str(run / "journal"))
        .load()
    )


def write_stream(df: Any, run: Path) -> float:
    """``df`` written into a Delta table under ``run`` (availableNow): the write's seconds."""
    import dspark_json

    started = time.perf_counter()
    dspark_json.write_delta(
        df,
        str(run / "table"),
        checkpoint=str(run / "checkpoint"),
        trigger={"availableNow": True},
    ).awaitTermination()
    return time.perf_counter() - started


def stream_figures(prompts: int, latencies: list[float], limits: list[int]) -> list[dict[str, Any]]:
    import dspark_json
    from dspark_json.dev.local import SimulatorProcess, local_spark
    from dspark_json.dev.samples import write_sample_prompts

    schema = (Path(dspark_json.__file__).parent / "examples" / "review_schema.json").read_text()
    spark = local_spark("dspark-json stream benchmark")
    dspark_json.register(spark)
    figures = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            write_sample_prompts(work / "prompts", prompts)
            write_sample_prompts(work / "warm", 20)
            runs = [(latency, limit) for latency in latencies for limit in limits]
            for i, (latency, limit) in enumerate([(0.0, limits[0]), *runs]):
                with SimulatorProcess(latency=latency) as server:
                    source = work / ("warm" if i == 0 else "prompts")
                    run = work / f"run-{i}"
                    df = stream_source(
                        spark, server.url, source, schema, concurrency=limit, run=run
                    )
                    seconds = write_stream(df, run)
                if i == 0:
                    continue  # warm-up: Python workers, numba's compile cache, JIT
                figures.append(
                    {
                        "latency_ms": latency * 1000,
                        "max_concurrency": limit,
                        "prompts": prompts,
                        "seconds": seconds,
                        "rows_per_s": prompts / seconds,
                    }
                )
                print(
                    f"stream latency {latency * 1000:.0f} ms, maxConcurrency {limit}: "
                    f"{seconds:.1f}s",
                    flush=True,
                )
    finally:
        spark.stop()
    return figures


def write_report(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    meta = report["machine"]
    lines = [
        f"Benchmark report, {meta['date']}, {meta['cpu_cores']} cores ({meta['platform']}, "
        f"Python {meta['python']}). Command: `{meta['command']}`",
        "",
        "Parser (`parse_responses`, review corpus with fenced/prose/corrupt bodies):",
        "",
        "| backend | bodies | seconds | records/s | MB/s |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {f['backend']} | {f['rows']:,} | {f['seconds']:.3f} | {f['records_per_s']:,.0f} "
        f"| {f['mb_per_s']:.0f} |"
        for f in report["parser"]
    ]
    lines += [
        "",
        f"Stream (Spark local[2], {report['stream'][0]['prompts']:,} prompts -> simulator -> "
        "Delta, journal on, trigger availableNow; includes Spark's query start):",
        "",
        "| server latency ms | maxConcurrency | seconds | rows/s |",
        "|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {f['latency_ms']:.0f} | {f['max_concurrency']} | {f['seconds']:.1f} | "
        f"{f['rows_per_s']:,.0f} |"
        for f in report["stream"]
    ]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _plots(report, out)


def _plots(report: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for backend in sorted({f["backend"] for f in report["parser"]}):
        points = [f for f in report["parser"] if f["backend"] == backend]
        ax.plot([f["rows"] for f in points], [f["mb_per_s"] for f in points], "o-", label=backend)
    ax.set_xscale("log")
    ax.set_xlabel("bodies per call")
    ax.set_ylabel("MB/s (higher is better)")
    ax.set_title("Parser throughput by backend and corpus size")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "report_parser.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for latency in sorted({f["latency_ms"] for f in report["stream"]}):
        points = [f for f in report["stream"] if f["latency_ms"] == latency]
        ax.plot(
            [f["max_concurrency"] for f in points],
            [f["rows_per_s"] for f in points],
            "o-",
            label=f"server latency {latency:.0f} ms",
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("maxConcurrency (per task, 2 tasks)")
    ax.set_ylabel("rows/s into Delta")
    ax.set_title("End-to-end stream throughput")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "report_stream.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000,200000", help="parser corpus sizes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2000, help="prompts per stream run")
    parser.add_argument("--latencies", default="0,0.05,0.2", help="server seconds per answer")
    parser.add_argument("--limits", default="4,16,64", help="maxConcurrency values")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.repeat, args.prompts = "200,800", 1, 40
        args.latencies, args.limits = "0,0.05", "4,16"
    report = {
        "machine": {
            **machine(),
            "command": "python benchmarks/report.py " + " ".join(argv or sys.argv[1:]),
        },
        "parser": parser_figures([int(s) for s in args.sizes.split(",")], args.repeat),
        "stream": stream_figures(
            args.prompts,
            [float(x) for x in args.latencies.split(",")],
            [int(x) for x in args.limits.split(",")],
        ),
    }
    write_report(report, args.out)
    print((args.out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
