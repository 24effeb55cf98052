"""The GPU backend next to the CPU backend at 100k to 10M bodies: rows/s and GB/s of
``parse_responses`` on each backend, and of the device's fit check alone, side by side in one run
(each contender's best of ``--repeat``, in rounds). Two corpora: ``whole`` (vLLM bodies whose
contents hold whole numbers) and ``review`` (the parser benchmark's corpus: its scores have
fractions, which cuDF reads as text and the device converts, parse/gpu/doubles.py; measured at
the two smallest sizes, to keep the device run short). Both stay on the device. Bodies are a
few hundred seeded ones repeated at the Arrow level, so a 10M-body batch is built in seconds.
Without a device only the CPU is measured.

    python3 benchmarks/gpu/fit_throughput.py --sizes 100000 1000000 10000000 --out results
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

CONTENT = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "stars": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "flag": {"type": "boolean"},
    },
}
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()


def whole_bodies(count: int, seed: int = 7) -> list[str]:
    """vLLM-shaped bodies (0.32's keys) whose contents fit and hold no fraction."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        content = {
            "label": " ".join(rng.choices(WORDS, k=rng.randint(3, 40))),
            "stars": rng.randint(1, 5),
            "tags": rng.choices(WORDS, k=rng.randint(0, 12)),
            "flag": rng.random() < 0.5,
        }
        body = {
            "id": f"chatcmpl-{i:016x}",
            "object": "chat.completion",
            "created": 1796036068,
            "model": "tiny-random",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": json.dumps(content)},
                    "logprobs": None,
                    "finish_reason": "stop",
                    "stop_reason": None,
                }
            ],
            "system_fingerprint": "vllm-0.32.0",
            "usage": {"prompt_tokens": 18, "total_tokens": 50, "completion_tokens": 32},
        }
        out.append(json.dumps(body))
    return out


def tiled(bodies: list[str], rows: int) -> pa.Array:
    """``rows`` bodies: ``bodies`` repeated, as one Arrow string array (buffers tiled)."""
    base = pa.array(bodies, pa.large_string())
    offsets = np.frombuffer(base.buffers()[1], np.int64)[: len(base) + 1]
    data = np.frombuffer(base.buffers()[2], np.uint8)[: offsets[-1]]
    times = -(-rows // len(base))
    lengths = np.diff(offsets)
    all_lengths = np.tile(lengths, times)[:rows]
    all_offsets = np.concatenate([[0], np.cumsum(all_lengths)]).astype(np.int64)
    all_data = np.tile(data, times)[: all_offsets[-1]]
    return pa.LargeStringArray.from_buffers(rows, pa.py_buffer(all_offsets), pa.py_buffer(all_data))


def best(repeat: int, runs: list[Any]) -> list[float]:
    """Each run's best time of ``repeat``, after a warm-up, in rounds."""
    for run in runs:
        run()
    times = [float("inf")] * len(runs)
    for _ in range(repeat):
        for i, run in enumerate(runs):
            started = time.perf_counter()
            run()
            times[i] = min(times[i], time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.repeat = [200], 1

    from parser_throughput import CONTENT_SCHEMA, corpus

    import dspark_json
    from dspark_json.buffers.arrow import string_buffers
    from dspark_json.parse import gpu

    reason = gpu.unavailable_reason()
    on_device = reason is None
    figures: list[dict[str, Any]] = []
    meta = {
        "cpu_cores": os.cpu_count(),
        "gpu": "measured" if on_device else f"not measured: {reason}",
        "command": "python3 benchmarks/gpu/fit_throughput.py " + " ".join(argv or sys.argv[1:]),
    }
    corpora = [("whole", whole_bodies(500), CONTENT, args.sizes)]
    corpora.append(("review", corpus(500), CONTENT_SCHEMA, args.sizes[:2]))
    # Smallest sizes first, every corpus at each: a timeout cuts only the largest.
    runs_in_order = sorted(
        (
            (rows, name, bodies, content)
            for name, bodies, content, sizes in corpora
            for rows in sizes
        ),
        key=lambda run: run[0],
    )
    for rows, name, bodies, content in runs_in_order:
        schema = dspark_json.response_schema(response_format=content)
        array = tiled(bodies, rows)
        size = array.buffers()[2].size
        runs = {
            "CPU backend": lambda a=array, s=schema: dspark_json.parse_responses(
                a, schema=s, backend="cpu"
            ),
        }
        if on_device:
            from dspark_json.parse.gpu.fit import DeviceFit
            from dspark_json.parse.plan import plan_of
            from dspark_json.rows import data_fields

            buffers = string_buffers(array)
            plan = plan_of(data_fields(schema), False)
            assert plan is not None
            runs["GPU backend"] = lambda a=array, s=schema: dspark_json.parse_responses(
                a, schema=s, backend="gpu"
            )
            # The envelope's fit (transfers and scratch included), without cuDF's read.
            runs["GPU fit kernel alone"] = lambda b=buffers, t=plan.envelope_table: DeviceFit().fit(
                *b, t
            )
        for contender, seconds in zip(runs, best(args.repeat, list(runs.values())), strict=True):
            figures.append(
                {
                    "corpus": name,
                    "rows": rows,
                    "gigabytes": size / 1e9,
                    "contender": contender,
                    "seconds": seconds,
                    "rows_per_s": rows / seconds,
                    "gb_per_s": size / 1e9 / seconds,
                }
            )
            print(f"{name:7s} {rows:>10,} {contender:22s} {seconds:9.3f}s", flush=True)
        write(args.out, figures, meta)  # after each size: a timeout keeps what was measured
    print("\n".join(write(args.out, figures, meta)))
    return 0


def write(out: Path, figures: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """Write the figures so far to ``out`` (JSON and a Markdown table); the table's lines."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_fit_throughput.json").write_text(
        json.dumps({"meta": meta, "figures": figures}, indent=1)
    )
    lines = [
        f"GPU: {meta['gpu']}; {meta['cpu_cores']} CPU cores. `{meta['command']}`",
        "",
        "| corpus | bodies | GB | contender | s | rows/s | GB/s |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {f['corpus']} | {f['rows']:,} | {f['gigabytes']:.3f} | {f['contender']} | "
        f"{f['seconds']:.3f} | {f['rows_per_s']:,.0f} | {f['gb_per_s']:.3f} |"
        for f in figures
    ]
    (out / "gpu_fit_throughput.md").write_text("\n".join(lines) + "\n")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
