"""Options dedupe and cache: requests sent on a repeated workload, and what the cache costs on
disk.

    .venv/bin/python benchmarks/response_cache.py           # results/response_cache.{md,json}
    .venv/bin/python benchmarks/response_cache.py --smoke   # tiny sizes

The demo's sample review prompts (its review schema, temperature 0), made distinct by their
number, then a third of the rows repeated (each repeat a copy of an earlier prompt, its own
custom_id), shuffled with a fixed seed, in tasks of ``partitionSize`` 256 rows: each task's
rows go through the source's request path (``dspark_json.pipeline.fetch``) to the simulator
process, which counts what it served (``GET /stats``). Runs, side by side on one simulator:
dedupe off; dedupe auto (the default); dedupe auto with a fresh cache; the same again on that
cache (a re-run). The cache's entries are measured as written (bytes per entry, and the disk
blocks the filesystem gives them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.samples import write_sample_prompts
from dspark_json.fs import write_atomic
from dspark_json.http.cache import ENTRY_SUFFIX
from dspark_json.inputs.listing import PromptListing
from dspark_json.inputs.prompts import read_segment
from dspark_json.options import Options, Query
from dspark_json.pipeline import fetch
from dspark_json.records import PromptRecord
from dspark_json.storage import ENVIRONMENT_ONLY

RESULTS = Path(__file__).parent / "results"
PARTITION = 256


def workload(directory: Path, distinct: int) -> list[PromptRecord]:
    """``distinct`` demo prompts, each made distinct by its number, plus half as many repeats
    (a third of all rows), shuffled."""
    write_sample_prompts(directory, distinct, files=1)
    (path,) = directory.iterdir()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i, row in enumerate(rows):
        row["prompt"] = f"{row['prompt']} (review {i})"
    rng = random.Random(33)
    repeats = [dict(rng.choice(rows), custom_id=f"repeat-{k:05d}") for k in range(distinct // 2)]
    everything = rows + repeats
    rng.shuffle(everything)
    path.write_text("".join(json.dumps(r) + "\n" for r in everything))
    (segment,) = PromptListing(str(directory), option="prompts").sample(len(everything))
    return list(read_segment(segment))


def run(server: SimulatorProcess, records: list[PromptRecord], **options: str) -> dict[str, Any]:
    """One pass over ``records`` in tasks of PARTITION rows; what was sent and reused."""
    schema = resources.files("dspark_json").joinpath("examples/review_schema.json").read_text()
    raw = {
        "endpoint": server.url,
        "prompts": "unused",
        "responseFormat": schema,
        "temperature": "0",
        **options,
    }
    query = Query(options=Options.parse(raw), model="dspark-sim")
    before = server.stats().get("chat_completions", 0)
    counts = {"deduplicated": 0, "cache_hits": 0, "cache_misses": 0, "answered": 0}
    for start in range(0, len(records), PARTITION):
        fetched = fetch(records[start : start + PARTITION], query)
        stats = fetched.stats
        counts["deduplicated"] += stats.deduplicated
        counts["cache_hits"] += stats.cache_hits
        counts["cache_misses"] += stats.cache_misses
        counts["answered"] += sum(o.body is not None and o.error is None for o in fetched.outcomes)
    sent = server.stats()["chat_completions"] - before
    return {"options": options, "rows": len(records), "requests_sent": sent, **counts}


def entries(cache: Path) -> dict[str, Any]:
    """The cache's entries: how many, their bytes, and the disk blocks they take."""
    files = list(cache.rglob(f"*{ENTRY_SUFFIX}"))
    size = sum(f.stat().st_size for f in files)
    blocks = sum(os.stat(f).st_blocks * 512 for f in files)
    header = sum(len(f.read_bytes().partition(b"\n")[0]) + 1 for f in files)
    return {
        "entries": len(files),
        "bytes": size,
        "header_bytes_per_entry": round(header / len(files)) if files else None,
        "bytes_per_entry": round(size / len(files)) if files else None,
        "disk_bytes_per_entry": round(blocks / len(files)) if files else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    distinct = 20 if args.smoke else 1000
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        records = workload(work / "prompts", distinct)
        cache = work / "cache"
        with SimulatorProcess(seed=33) as server:
            runs = [
                ("dedupe off", run(server, records, dedupe="off")),
                ("dedupe auto (default)", run(server, records)),
                ("dedupe auto + cache, first run", run(server, records, cache=str(cache))),
                ("dedupe auto + cache, re-run", run(server, records, cache=str(cache))),
            ]
        disk = entries(cache)
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "distinct": distinct,
        "runs": [{"name": name, **figures} for name, figures in runs],
        "cache": disk,
    }
    write_atomic(
        str(args.out),
        "response_cache.json",
        json.dumps(result, indent=2).encode(),
        storage=ENVIRONMENT_ONLY,
    )
    write_atomic(
        str(args.out), "response_cache.md", report(result).encode(), storage=ENVIRONMENT_ONLY
    )
    print(report(result))


def report(result: dict[str, Any]) -> str:
    base = result["runs"][0]["requests_sent"]
    lines = [
        "# Options dedupe and cache: requests sent on a repeated workload",
        "",
        f"{result['runs'][0]['rows']} rows: {result['distinct']} distinct demo prompts and a "
        "third of the rows repeats, shuffled, temperature 0, tasks of 256 rows, simulator. "
        "`.venv/bin/python benchmarks/response_cache.py` "
        f"({result['when']}, {result['machine']['cpus']} CPUs).",
        "",
        "| run | requests sent | vs dedupe off | rows deduplicated | cache hits | cache misses |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        ratio = f"{r['requests_sent'] / base:.2f}" if base else "-"
        lines.append(
            f"| {r['name']} | {r['requests_sent']} | {ratio} | {r['deduplicated']} | "
            f"{r['cache_hits']} | {r['cache_misses']} |"
        )
    disk = result["cache"]
    lines += [
        "",
        f"Cache on disk: {disk['entries']} entries, {disk['bytes']} bytes: "
        f"{disk['bytes_per_entry']} bytes per entry (the answer body as received plus a "
        f"{disk['header_bytes_per_entry']}-byte header line), {disk['disk_bytes_per_entry']} "
        "bytes of disk blocks per entry on this filesystem (one block per file).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
