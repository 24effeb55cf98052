"""dspark-json's HTTP client: against the naive UDF, at its ceiling, and against a full server.

    .venv/bin/python benchmarks/client_throughput.py            # writes results/client_throughput.*
    .venv/bin/python benchmarks/client_throughput.py --smoke    # tiny sizes (the test suite)

Side by side in one run, each part on its own simulator process:

1. Same Spark parallelism (local[2], two tasks), same prompts, server latency 50 ms: the
   ``dspark-json`` source (requests + parsing into typed columns) vs what users write first, a
   Python UDF calling ``requests.post`` per row (no parsing at all).
2. The zero-latency ceiling on this machine: the source through Spark, our client in one process,
   and a bare asyncio HTTP/1.1 client (what the simulator itself can answer).
3. A server with a capacity limit (16 at once, 50 ms each; the rest queue, as in vLLM): the
   adaptive limit vs a fixed concurrency far above capacity, in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dspark_json.dev.local import SimulatorProcess, local_spark
from dspark_json.dev.simulator import Faults
from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.records import Fetched
from dspark_json.request.body import response_format_body

RESULTS = Path(__file__).parent / "results"
SCHEMA = json.loads(
    resources.files("dspark_json").joinpath("examples/review_schema.json").read_text()
)


def request(i: int) -> dict[str, Any]:
    return {
        "model": "dspark-sim",
        "messages": [{"role": "user", "content": f"Review {i}: it works"}],
        "response_format": response_format_body(SCHEMA),
    }


def write_prompts(directory: Path, n: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = (
        json.dumps({"custom_id": f"p{i}", "prompt": f"Review {i}: it works"}) for i in range(n)
    )
    (directory / "prompts.jsonl").write_text("\n".join(lines) + "\n")


# --- 1 and 2: through Spark ----------------------------------------------------------------------


def spark_ours(spark: Any, url: str, prompts: Path, n: int) -> float:
    df = (
        spark.read.format("dspark-json")
        .option("endpoint", url)
        .option("prompts", str(prompts))
        .option("responseFormat", json.dumps(SCHEMA))
        .option("partitionSize", str((n + 1) // 2))  # two tasks, as the UDF gets
        .option("maxConcurrency", "64")
        .load()
    )
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def spark_naive_udf(spark: Any, url: str, prompts: Path) -> float:
    from pyspark.sql.functions import col, udf

    response_format = response_format_body(SCHEMA)

    @udf("string")
    def ask(prompt: str) -> str:
        import requests

        body = {
            "model": "dspark-sim",
            "messages": [{"role": "user", "content": prompt}],
            "response_format": response_format,
        }
        return str(requests.post(f"{url}/v1/chat/completions", json=body, timeout=60).text)

    df = spark.read.json(str(prompts)).repartition(2).select(ask(col("prompt")).alias("body"))
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


# --- 2 and 3: in one process ----------------------------------------------------------------------


def in_process(url: str, n: int, **config: Any) -> tuple[float, Fetched]:
    requests = [request(i) for i in range(n)]
    cfg = HttpOptions(endpoints=(Endpoint(url),), **config)
    complete_all(requests[:20], cfg)  # warm-up: imports, first sockets
    started = time.perf_counter()
    fetched = complete_all(requests, cfg)
    elapsed = time.perf_counter() - started
    assert all(o.error is None for o in fetched.outcomes), "errors in a benchmark run"
    return elapsed, fetched


async def _bare(url: str, bodies: list[bytes], connections: int) -> None:
    parts = urlsplit(url)
    chunks = [bodies[k::connections] for k in range(connections)]

    async def one(chunk: list[bytes]) -> None:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        for body in chunk:
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\n"
                b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
        writer.close()

    await asyncio.gather(*(one(c) for c in chunks))


def bare(url: str, n: int) -> float:
    bodies = [json.dumps(request(i)).encode() for i in range(n)]
    started = time.perf_counter()
    asyncio.run(_bare(url, bodies, 32))
    return time.perf_counter() - started


# --- the run ------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {"spark": [], "ceiling": [], "capacity": []}
    work = Path(tempfile.mkdtemp(prefix="dspark-bench-"))
    spark = local_spark("dspark-json client benchmark")
    import dspark_json

    dspark_json.register(spark)
    try:
        with SimulatorProcess(latency=args.latency) as server:
            write_prompts(work / "warm", 20)
            spark_ours(spark, server.url, work / "warm", 20)  # warm-up: JVM, workers, JIT cache
            spark_naive_udf(spark, server.url, work / "warm")
            write_prompts(work / "p", args.prompts)
            timed = (
                (
                    "dspark-json source (requests + typed parse)",
                    lambda: spark_ours(spark, server.url, work / "p", args.prompts),
                ),
                (
                    "Python UDF, requests.post per row (no parse)",
                    lambda: spark_naive_udf(spark, server.url, work / "p"),
                ),
            )
            for name, measure in timed:
                seconds = measure()
                figures["spark"].append(
                    {"name": name, "seconds": seconds, "requests_per_s": args.prompts / seconds}
                )
        with SimulatorProcess(latency=0.0) as server:
            seconds = spark_ours(spark, server.url, work / "p", args.prompts)
            figures["ceiling"].append(
                {
                    "name": "dspark-json source, Spark local[2]",
                    "requests_per_s": args.prompts / seconds,
                }
            )
            seconds, _ = in_process(
                server.url, args.ceiling, max_concurrency=64, adaptive_concurrency=False
            )
            figures["ceiling"].append(
                {
                    "name": "dspark-json client, 1 process, 64 in flight",
                    "requests_per_s": args.ceiling / seconds,
                }
            )
            seconds = bare(server.url, args.ceiling)
            figures["ceiling"].append(
                {
                    "name": "bare asyncio client, 32 connections (simulator ceiling)",
                    "requests_per_s": args.ceiling / seconds,
                }
            )
    finally:
        spark.stop()
    faults = Faults(capacity=args.capacity)
    with SimulatorProcess(latency=args.latency, faults=faults) as server:
        for name, config in (
            (
                f"fixed {args.fixed} in flight",
                {"max_concurrency": args.fixed, "adaptive_concurrency": False},
            ),
            (
                f"adaptive (starts at 8, at most {args.fixed})",
                {"max_concurrency": args.fixed, "initial_concurrency": 8},
            ),
        ):
            seconds, fetched = in_process(server.url, args.capacity_requests, **config)
            stats = fetched.stats
            figures["capacity"].append(
                {
                    "name": name,
                    "requests_per_s": args.capacity_requests / seconds,
                    "p50_ms": 1000 * (stats.latency(0.5) or 0),
                    "p95_ms": 1000 * (stats.latency(0.95) or 0),
                    "limit_final": stats.limit_final,
                    "limit_range": [stats.limit_lowest, stats.limit_peak],
                }
            )
    return figures


def write_results(figures: dict[str, Any], meta: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "client_throughput.json").write_text(
        json.dumps({"machine": meta, "figures": figures}, indent=2) + "\n"
    )
    naive = figures["spark"][-1]
    lines = [
        f"Client throughput, {meta['cpu_cores']} cores, {meta['date']}. Command: "
        f"`{meta['command']}`",
        "",
        f"Spark local[2] (two tasks each), {meta['prompts']:,} prompts, server latency "
        f"{meta['latency'] * 1000:.0f} ms:",
        "",
        "| contender | seconds | requests/s | vs naive UDF |",
        "|---|---:|---:|---:|",
    ]
    for f in figures["spark"]:
        ratio = naive["seconds"] / f["seconds"]
        lines.append(
            f"| {f['name']} | {f['seconds']:.1f} | {f['requests_per_s']:,.0f} | {ratio:.1f}x |"
        )
    lines += ["", "Zero server latency (the ceiling on this machine):", ""]
    lines += ["| client | requests/s |", "|---|---:|"]
    lines += [f"| {f['name']} | {f['requests_per_s']:,.0f} |" for f in figures["ceiling"]]
    lines += [
        "",
        f"A server with capacity {meta['capacity']} (each {meta['latency'] * 1000:.0f} ms, the "
        f"rest queue), {meta['capacity_requests']:,} requests in one process:",
        "",
        "| in-flight limit | requests/s | p50 ms | p95 ms | limit at the end (range) |",
        "|---|---:|---:|---:|---|",
    ]
    for f in figures["capacity"]:
        low, high = f["limit_range"]
        lines.append(
            f"| {f['name']} | {f['requests_per_s']:,.0f} | {f['p50_ms']:.0f} | {f['p95_ms']:.0f} "
            f"| {f['limit_final']} ({low}-{high}) |"
        )
    (out / "client_throughput.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=2000, help="prompts through Spark")
    parser.add_argument("--latency", type=float, default=0.05, help="server seconds per answer")
    parser.add_argument("--ceiling", type=int, default=4000, help="requests, zero latency")
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--fixed", type=int, default=256, help="the fixed in-flight limit")
    parser.add_argument("--capacity-requests", type=int, default=4000)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.prompts, args.ceiling, args.capacity_requests, args.fixed = 40, 200, 200, 32
    figures = run(args)
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "command": " ".join(["benchmarks/client_throughput.py", *(argv or sys.argv[1:])]),
        "prompts": args.prompts,
        "latency": args.latency,
        "capacity": args.capacity,
        "capacity_requests": args.capacity_requests,
    }
    write_results(figures, meta, args.out)
    sys.stdout.write((args.out / "client_throughput.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
