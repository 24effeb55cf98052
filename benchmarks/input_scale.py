"""Prompt input at scale, on the driver and in the tasks: what the source does before and while it
plans micro-batches, measured on the source's own listing and planning code (no Spark, no model
server: the figures are the input stage's alone).

    .venv/bin/python benchmarks/input_scale.py                 # writes results/input_scale.*
    .venv/bin/python benchmarks/input_scale.py --smoke         # tiny sizes (the test suite)
    PYTHONPATH=/work/main .venv/bin/python benchmarks/input_scale.py --label before ...
                                                               # the same against another tree

Three inputs, each measured in a fresh process (its memory is its own):

1. One big JSON lines file (``--big-mb``): the driver's peak memory above its baseline, and the
   time to the first micro-batch (list, index, plan ``maxRecordsPerTrigger`` rows).
2. One ``.jsonl.gz`` (``--gz-mb`` compressed): micro-batches of a quarter of its rows, each
   planned and then read as Spark's tasks read it (every task in a process of its own, so
   nothing carries over between tasks): how many times the file is decompressed, per batch.
3. A directory of many small files (``--files``): ``--batches`` micro-batches of
   ``maxFilesPerTrigger`` files each, as the streaming source plans them (one listing per
   batch): planning time per batch at the start and at the end.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
PARTITION_SIZE = 256
WORDS = (
    "the kettle boils fast and the lid clicks shut but the handle gets hot after a while so "
    "I would buy it again for the price though the cord is short and the light is too bright"
).split()


def prompt_lines(rng: random.Random, n: int, start: int = 0) -> bytes:
    """``n`` prompt lines (about 150 bytes each), numbered from ``start``."""
    return b"".join(
        json.dumps(
            {
                "custom_id": f"r{start + i}",
                "prompt": "Review: " + " ".join(rng.choices(WORDS, k=14)),
                "stars": rng.randint(1, 5),
            }
        ).encode()
        + b"\n"
        for i in range(n)
    )


def write_big(path: Path, megabytes: int) -> int:
    """A JSON lines file of about ``megabytes`` MB (a block of lines written again and again,
    each block's ids its own); returns its row count."""
    rng = random.Random(1)
    block_rows = 20_000
    block = prompt_lines(rng, block_rows)
    rows = 0
    with path.open("wb") as out:
        while out.tell() < megabytes * 1_000_000:
            out.write(block.replace(b'"r', b'"b%d-' % (rows // block_rows)))
            rows += block_rows
    return rows


def write_gz(path: Path, megabytes: int) -> int:
    """A ``.jsonl.gz`` of about ``megabytes`` MB compressed; returns its row count."""
    rng = random.Random(2)
    rows = 0
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as out:
        while raw.tell() < megabytes * 1_000_000:
            out.write(prompt_lines(rng, 20_000, rows))
            rows += 20_000
    return rows


def write_many(directory: Path, files: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(3)
    for k in range(files):
        (directory / f"{k:07d}.jsonl").write_bytes(prompt_lines(rng, 2, 2 * k))


# ---- children: each runs in a process of its own and prints one JSON object ----


def _status(field: str) -> int:
    """A field of /proc/self/status in bytes (VmRSS: now; VmHWM: the peak so far)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def child_big(directory: str, max_rows: int) -> dict[str, Any]:
    from dspark_json.inputs.listing import Position, PromptListing, plan_partitions

    baseline = _status("VmRSS")
    started = time.perf_counter()
    listing = PromptListing(directory)
    end = listing.advance(Position(), max_rows=max_rows)
    partitions = plan_partitions(listing.segments(Position(), end), PARTITION_SIZE, listing.locate)
    first_batch = time.perf_counter() - started
    rows = listing.end().row
    return {
        "baseline_mb": baseline / 1e6,
        "peak_mb": _status("VmHWM") / 1e6,
        "peak_above_baseline_mb": (_status("VmHWM") - baseline) / 1e6,
        "first_batch_s": first_batch,
        "file_rows": rows,
        "partitions": len(partitions),
    }


def child_gz(directory: str, batches: int) -> dict[str, Any]:
    import pyarrow as pa

    from dspark_json.inputs import files

    # Where the stream cursor lives: inputs/row_index.py, inputs/files.py before the split.
    cursor = getattr(files, "_Cursor", None)
    if cursor is None:
        from dspark_json.inputs.row_index import _Cursor as cursor
    from dspark_json.inputs.listing import (
        Position,
        PromptListing,
        plan_partitions,
        segment_packed,
    )

    opened = [0]
    real = pa.CompressedInputStream

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened[0] += 1
        return real(*args, **kwargs)

    pa.CompressedInputStream = counting  # every decompression, whichever code opens it
    baseline = _status("VmRSS")
    listing = PromptListing(directory)
    started = time.perf_counter()
    rows = listing.end().row
    index_s = time.perf_counter() - started
    driver = opened[0]
    per_batch = -(-rows // batches)
    position, out = Position(), []
    while True:
        end = listing.advance(position, max_rows=per_batch)
        if end == position:
            break
        segments = listing.segments(position, end)
        partitions = plan_partitions(segments, PARTITION_SIZE, listing.locate)
        before, read_rows = opened[0], 0
        started = time.perf_counter()
        for partition in partitions:  # one task each, each in a process of its own
            if cursor is not None:
                cursor._last = None
            for part in getattr(partition, "parts", ()) or (partition,):
                for segment in part.segments:
                    read_rows += len(segment_packed(segment)[1]) - 1
        out.append(
            {
                "rows": read_rows,
                "tasks": len(partitions),
                "decompressions": opened[0] - before,
                "tasks_s": time.perf_counter() - started,
            }
        )
        position = end
    return {
        "file_rows": rows,
        "driver_decompressions": driver,
        "driver_index_s": index_s,
        "driver_peak_above_baseline_mb": (_status("VmHWM") - baseline) / 1e6,
        "batches": out,
    }


def child_many(directory: str, batches: int, max_files: int) -> dict[str, Any]:
    from dspark_json.inputs.listing import Position, plan_partitions
    from dspark_json.source import _BatchListing

    listing = _BatchListing(directory, option="prompts")
    position, times, rows = Position(), [], 0
    for _ in range(batches):
        started = time.perf_counter()
        listing.refresh()  # what latestOffset does, once per micro-batch
        end = listing.advance(position, max_files=max_files)
        segments = listing.segments(position, end)
        plan_partitions(segments, PARTITION_SIZE, listing.locate)
        times.append(time.perf_counter() - started)
        rows += sum(s.end - s.start for s in segments)
        position = end
    first, last = times[:10], times[-10:]
    return {
        "batches": len(times),
        "rows": rows,
        "first_batch_s": times[0],
        "last_batch_s": times[-1],
        "median_first_10_s": statistics.median(first),
        "median_last_10_s": statistics.median(last),
        "last_over_first": statistics.median(last) / statistics.median(first),
        "times_s": times,
    }


def run_child(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    if done.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(result: dict[str, Any]) -> str:
    big, gz, many = result["big"], result["gz"], result["many"]
    lines = [
        f"# Prompt input at scale ({result['label']}, {result['date']})",
        "",
        f"`{result['command']}` on {result['machine']} (busy: shared by other work).",
        "",
        "| input | figure | value |",
        "|---|---|---|",
        f"| one {big['file_mb']:.0f} MB JSON lines file ({big['file_rows']:,} rows) | driver "
        f"peak memory above baseline | {big['peak_above_baseline_mb']:.0f} MB (peak "
        f"{big['peak_mb']:.0f} MB) |",
        f"| | time to the first micro-batch ({big['max_rows']:,} rows planned) | "
        f"{big['first_batch_s']:.1f} s |",
        f"| one {gz['file_mb']:.0f} MB .jsonl.gz ({gz['file_rows']:,} rows) | decompressions "
        f"on the driver (its row count) | {gz['driver_decompressions']} "
        f"({gz['driver_index_s']:.1f} s, peak +{gz['driver_peak_above_baseline_mb']:.0f} MB) |",
    ]
    for k, batch in enumerate(gz["batches"]):
        lines.append(
            f"| | micro-batch {k + 1}: {batch['rows']:,} rows, {batch['tasks']} task(s) | "
            f"{batch['decompressions']} decompression(s), {batch['tasks_s']:.1f} s |"
        )
    lines += [
        f"| {many['files']:,} files of 2 rows | planning time, batch 1 / batch "
        f"{many['batches']} ({many['max_files']} files each) | {many['first_batch_s'] * 1000:.0f}"
        f" ms / {many['last_batch_s'] * 1000:.0f} ms |",
        f"| | median of batches 1-10 / of the last 10 | "
        f"{many['median_first_10_s'] * 1000:.0f} ms / {many['median_last_10_s'] * 1000:.0f} ms "
        f"(x{many['last_over_first']:.2f}) |",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big-mb", type=int, default=5000)
    parser.add_argument("--gz-mb", type=int, default=1000)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--max-rows", type=int, default=100_000)
    parser.add_argument("--work", default=None, help="where to write the inputs (a temp dir)")
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", nargs="+")
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        found = {"big": child_big, "gz": child_gz, "many": child_many}[kind](
            rest[0], *map(int, rest[1:])
        )
        print(json.dumps(found))
        return
    if args.smoke:
        args.big_mb, args.gz_mb, args.files, args.batches, args.max_rows = 3, 1, 400, 20, 1000
    work = Path(tempfile.mkdtemp(prefix="input-scale-", dir=args.work))
    try:
        result = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "input_scale" if args.label == "this tree" else f"input_scale_{args.label}"
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / f"{name}.md").write_text(report(result))
    print(report(result))


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    big_dir, gz_dir, many_dir = work / "big", work / "gz", work / "many"
    big_dir.mkdir()
    gz_dir.mkdir()
    started = time.perf_counter()
    write_big(big_dir / "prompts.jsonl", args.big_mb)
    print(f"wrote the big file in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    big = run_child("big", str(big_dir), str(args.max_rows))
    big.update(file_mb=(big_dir / "prompts.jsonl").stat().st_size / 1e6, max_rows=args.max_rows)
    (big_dir / "prompts.jsonl").unlink()
    started = time.perf_counter()
    write_gz(gz_dir / "prompts.jsonl.gz", args.gz_mb)
    print(f"wrote the .gz in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    gz = run_child("gz", str(gz_dir), "4")
    gz["file_mb"] = (gz_dir / "prompts.jsonl.gz").stat().st_size / 1e6
    started = time.perf_counter()
    write_many(many_dir, args.files)
    print(f"wrote {args.files} files in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    max_files = max(args.files // args.batches, 1)
    many = run_child("many", str(many_dir), str(args.batches), str(max_files))
    many.update(files=args.files, max_files=max_files)
    return {
        "label": args.label,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "command": "python benchmarks/input_scale.py " + " ".join(sys.argv[1:]),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "big": big,
        "gz": gz,
        "many": many,
    }


if __name__ == "__main__":
    main()
