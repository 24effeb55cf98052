"""Re-asks (option repairAttempts): how many rows they fix, and what they cost in tokens.

    .venv/bin/python benchmarks/repair.py                # writes results/repair.{md,json}
    .venv/bin/python benchmarks/repair.py --smoke        # tiny sizes

The demo's stream (its sample review prompts, each made distinct by its number; its review
schema; ``validateSchema``; into a Delta table through the ``dspark-delta`` sink, trigger
availableNow) on the simulator with a fifth of first answers broken in ways a re-ask can fix (a
twentieth each: cut at ``max_tokens``, broken JSON, prose, a required property left out), once
with ``repairAttempts=0`` and once with ``2``, on the same simulator seed. Per run: the rows
right (``_status`` ok, no schema violation), the re-asks, and the tokens of the first answers
and of the re-asks (from the metrics records).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

import dspark_json
from dspark_json.dev.local import SimulatorProcess, local_spark
from dspark_json.dev.samples import write_sample_prompts
from dspark_json.dev.simulator import Faults
from dspark_json.fs import write_atomic
from dspark_json.storage import ENVIRONMENT_ONLY

RESULTS = Path(__file__).parent / "results"
BROKEN = Faults(
    first_truncated_rate=0.05,
    first_broken_rate=0.05,
    first_prose_rate=0.05,
    first_invalid_rate=0.05,
)
MAX_TOKENS = 160  # the review answers need 40-130 tokens: none is cut unless broken


def write_prompts(directory: Path, rows: int) -> None:
    """The demo's sample prompts, each made distinct by its number: the simulator draws a
    first answer's fault per prompt, and the demo's reviews repeat."""
    write_sample_prompts(directory, rows)
    for path in sorted(directory.glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line]
        for line in lines:
            line["prompt"] += f" (review {line['custom_id']})"
        text = "".join(json.dumps(line) + "\n" for line in lines)
        write_atomic(str(directory), path.name, text.encode(), storage=ENVIRONMENT_ONLY)


def run(spark: Any, work: Path, attempts: int, *, seed: int) -> dict[str, Any]:
    """One stream of the prompts in ``work/prompts``, on a fresh simulator."""
    out = work / f"attempts-{attempts}"
    schema = resources.files("dspark_json").joinpath("examples/review_schema.json").read_text()
    with SimulatorProcess(seed=seed, faults=BROKEN) as server:
        df = (
            spark.readStream.format("dspark-json")
            .option("endpoint", server.url)
            .option("prompts", str(work / "prompts"))
            .option("responseFormat", schema)
            .option("validateSchema", "true")
            .option("maxTokens", str(MAX_TOKENS))
            .option("repairAttempts", str(attempts))
            .option("journal", str(out / "journal"))
            .option("metrics", str(out / "metrics"))
            .load()
        )
        started = time.perf_counter()
        query = dspark_json.write_delta(
            df,
            str(out / "table"),
            checkpoint=str(out / "checkpoint"),
            trigger={"availableNow": True},
        )
        query.awaitTermination()
        seconds = time.perf_counter() - started
        stats = server.stats()
    table = DeltaTable(str(out / "table")).to_pyarrow_table()
    rows = table.to_pylist()
    records = [json.loads(p.read_text()) for p in sorted((out / "metrics").glob("*.json"))]
    repair = [r["repair"] for r in records if r.get("repair")]
    first_prompt = sum(r["prompt_tokens"] for r in records)
    first_completion = sum(r["completion_tokens"] for r in records)
    reask_prompt = sum(r["prompt_tokens"] for r in repair)
    reask_completion = sum(r["completion_tokens"] for r in repair)
    right = sum(1 for r in rows if r["_status"] == "ok" and not r["_schema_violations"])
    return {
        "repair_attempts": attempts,
        "rows": len(rows),
        "distinct_prompts": len({r["custom_id"] for r in rows}),
        "statuses": dict(Counter(r["_status"] for r in rows)),
        "with_violations": sum(1 for r in rows if r["_schema_violations"]),
        "right": right,
        "right_pct": round(100 * right / len(rows), 2),
        "first_answers_broken": sum(
            stats.get(f"first_{k}", 0) for k in ("truncated", "broken", "prose", "invalid")
        )
        if attempts == 0
        else None,
        "reasks": sum(r["reasks"] for r in repair),
        "rows_reasked": sum(r["rows"] for r in repair),
        "rows_fixed": sum(r["fixed"] for r in repair),
        "requests_to_server": stats.get("chat_completions", 0),
        "first_tokens": {"prompt": first_prompt, "completion": first_completion},
        "reask_tokens": {"prompt": reask_prompt, "completion": reask_completion},
        "extra_tokens_pct": round(
            100 * (reask_prompt + reask_completion) / max(1, first_prompt + first_completion), 2
        ),
        "seconds": round(seconds, 2),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['date']}, {result['machine']}: `{result['command']}`. {result['rows']} demo "
        "prompts, review schema, validateSchema, maxTokens "
        f"{MAX_TOKENS}; a fifth of first answers broken (a twentieth each: cut at max_tokens, "
        "broken JSON, prose, a required property left out), simulator seed "
        f"{result['seed']}. The machine was shared (seconds are not the point here).",
        "",
        "| repairAttempts | rows right (ok, no violation) | statuses | re-asks | rows fixed | "
        "first answers' tokens (prompt + completion) | re-asks' tokens (prompt + completion) | "
        "extra tokens | requests | seconds |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in result["runs"]:
        first, reask = run["first_tokens"], run["reask_tokens"]
        lines.append(
            f"| {run['repair_attempts']} | {run['right']} of {run['rows']} "
            f"({run['right_pct']:.1f}%) | {run['statuses']}, {run['with_violations']} with "
            f"violations | {run['reasks']} | {run['rows_fixed']} | "
            f"{first['prompt']:,} + {first['completion']:,} | "
            f"{reask['prompt']:,} + {reask['completion']:,} | {run['extra_tokens_pct']:.1f}% | "
            f"{run['requests_to_server']} | {run['seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = 60 if args.smoke else args.rows
    work = Path(tempfile.mkdtemp(prefix="dspark-repair-"))
    spark = local_spark("dspark-json repair benchmark")
    try:
        dspark_json.register(spark)
        write_prompts(work / "prompts", rows)
        runs = [run(spark, work, attempts, seed=args.seed) for attempts in (0, 2)]
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    command = "benchmarks/repair.py" + (" --smoke" if args.smoke else f" --rows {rows}")
    result = {
        "date": datetime.now(UTC).date().isoformat(),
        "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "command": command,
        "rows": rows,
        "seed": args.seed,
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "repair.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (args.out / "repair.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
