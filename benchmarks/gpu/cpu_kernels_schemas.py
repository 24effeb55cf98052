"""A schema cuDF's JSON lines reader cannot take (a map, a tuple struct in the content) on the GPU
backend: its batches on the CPU kernels' path (``GpuParser`` now) against the reference parser
row by row (``GpuParser`` before: for a map the vectorised path's plan was None, reason
``column_types``; a tuple array made every row a content misfit), side by side in one run,
each contender's best of ``--repeat``, in rounds. No device needed: neither contender touches
it. The kernels are warmed first (compiled once).

    .venv/bin/python benchmarks/gpu/cpu_kernels_schemas.py --rows 20000 --repeat 3 \
        --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MAPPED = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "scores": {"type": "object", "additionalProperties": {"type": "number"}},
    },
}
TUPLED = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]},
    },
}


def bodies(kind: str, rows: int, seed: int = 7) -> list[str]:
    """vLLM-shaped bodies whose contents fit ``kind``'s type."""
    from tests.parse import test_backend_conformance as conformance

    rng = random.Random(seed)
    out = []
    for i in range(rows):
        if kind == "map":
            content = {
                "label": f"l{i}",
                "scores": {k: round(rng.random(), 3) for k in rng.sample("abcdefgh", 4)},
            }
        else:
            content = {"label": f"l{i}", "pair": [f"p{i}", round(rng.random(), 3)]}
        out.append(conformance.dumps(conformance.vllm_body(conformance.dumps(content))))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import pyarrow as pa

    from dspark_json import response_schema
    from dspark_json.parse.gpu.parser import GpuParser
    from dspark_json.parse.reference import ReferenceParser

    figures = []
    for kind, content_type in (("map", MAPPED), ("tuple", TUPLED)):
        schema = response_schema(response_format=content_type)
        batch = pa.array(bodies(kind, args.rows), pa.large_string())
        gpu = GpuParser(schema)
        assert gpu.cpu_kernels is not None, "the schema should take the CPU kernels"
        reference = ReferenceParser(schema)
        gpu.parse(batch[:64])  # compile what compiles, outside the timing
        contenders = {
            "CPU kernels (GpuParser now)": lambda g=gpu, b=batch: g.parse(b),
            "reference parser (GpuParser before)": lambda r=reference, b=batch: r.parse(
                b.to_pylist()
            ),
        }
        best = dict.fromkeys(contenders, float("inf"))
        for _ in range(args.repeat):
            for name, run in contenders.items():
                started = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - started)
        assert gpu.reference_rows == 0, gpu.reference_reasons
        for name, seconds in best.items():
            figures.append(
                {"schema": kind, "contender": name, "rows": args.rows, "seconds": seconds}
            )
    lines = ["| schema | contender | rows | best s | rows/s |", "|---|---|---|---|---|"]
    for f in figures:
        rate = f["rows"] / f["seconds"]
        lines.append(
            f"| {f['schema']} | {f['contender']} | {f['rows']} | {f['seconds']:.3f} | {rate:,.0f} |"
        )
    command = " ".join(["benchmarks/gpu/cpu_kernels_schemas.py", *(argv or sys.argv[1:])])
    text = "\n".join([f"`{command}`", "", *lines]) + "\n"
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_cpu_kernels.md").write_text(text)
        (args.out / "gpu_cpu_kernels.json").write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
