"""The CPU parser's fixed cost per batch, before and after a change, side by side in one run:
what a Spark task pays, a fresh parser (its schema unpickled, as each task's is) parsing one
batch of 256 vLLM bodies, against the same rows' share of 20,000 parsed in one batch. Two source
trees, each in its own processes (the kernels warm: loaded once per process, as a Python worker
that Spark reuses has them), the two taking turns; one thread; the best of each side counted.

    git worktree add --detach ../base main
    .venv/bin/python benchmarks/parser_fixed_cost.py --base ../base
    .venv/bin/python benchmarks/parser_fixed_cost.py --base ../base --smoke

The fixed cost per batch: a batch of 256 with a fresh parser, less 256 rows' share of the large
batch; a batch of 1 row is shown too (nearly all fixed cost).
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any

from parser_before_after import header, run_in, write_json  # the before/after benchmarks' parts

HERE = Path(__file__).parent
RESULTS = HERE / "results"

#: One side's run: the vLLM corpus, the kernels loaded by a first parse, then per size the best
#: CPU time of ``repeat`` fresh parsers (a pickled schema loaded each time), one thread.
_SIDE = textwrap.dedent(
    """
    import json, pickle, sys, time
    sys.path.insert(0, sys.argv[1])
    import pyarrow as pa
    import dspark_json
    from dspark_json.parse.cpu import CpuParser
    from parser_throughput import CONTENT_SCHEMA, corpus
    rows, repeat = int(sys.argv[2]), int(sys.argv[3])
    bodies = pa.array(corpus(rows, kind="vllm"), pa.string())
    schema = pickle.dumps(dspark_json.response_schema(response_format=CONTENT_SCHEMA))

    def fresh():
        parser = CpuParser(pickle.loads(schema))
        parser.vectorised.threads = 1
        return parser

    fresh().parse_vectorised(bodies)  # the kernels, loaded
    out = {}
    for size in (1, 256, rows):
        batch = bodies.slice(0, size)
        best = float("inf")
        for _ in range(repeat if size < rows else 3):
            started = time.process_time()
            fresh().parse_vectorised(batch)
            best = min(best, time.process_time() - started)
        out[str(size)] = best
    print(json.dumps(out))
    """
)


def side(tree: Path, rows: int, repeat: int) -> dict[str, float]:
    """One process of ``tree``: its best CPU seconds per batch size."""
    result: dict[str, float] = run_in(tree, _SIDE, str(HERE), str(rows), str(repeat))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the tree before the change")
    parser.add_argument("--after", type=Path, default=HERE.parent, help="default: this tree")
    parser.add_argument("--rows", type=int, default=20_000, help="the large batch")
    parser.add_argument("--rounds", type=int, default=3, help="processes per side")
    parser.add_argument("--repeat", type=int, default=40, help="fresh parsers per small size")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--out", type=Path, default=RESULTS / "parser_fixed_cost")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.rounds, args.repeat = 1000, 1, 3
    sides = {"before": args.base.resolve(), "after": args.after.resolve()}
    best: dict[str, dict[str, float]] = {label: {} for label in sides}
    for _ in range(args.rounds):
        for label, tree in sides.items():
            for size, seconds in side(tree, args.rows, args.repeat).items():
                best[label][size] = min(best[label].get(size, float("inf")), seconds)
    figures = {}
    for label in sides:
        large = best[label][str(args.rows)]
        share = large * 256 / args.rows
        figures[label] = {
            "batch_1_ms": best[label]["1"] * 1e3,
            "batch_256_ms": best[label]["256"] * 1e3,
            "share_of_large_per_256_ms": share * 1e3,
            "fixed_per_batch_ms": (best[label]["256"] - share) * 1e3,
        }
        print(
            f"{label:6s} fresh parser, 1 row {figures[label]['batch_1_ms']:.2f} ms, 256 rows "
            f"{figures[label]['batch_256_ms']:.2f} ms; 256 rows of {args.rows:,} in one "
            f"{share * 1e3:.2f} ms: fixed {figures[label]['fixed_per_batch_ms']:.2f} ms a batch",
            flush=True,
        )
    write(figures, args)
    return 0


def write(figures: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    """The results as JSON and Markdown under ``args.out`` (a path without suffix)."""
    meta = write_json(args, "parser_fixed_cost.py", "figures", figures)
    how = (
        "vLLM-shaped bodies, a fresh `CpuParser` per batch (its schema unpickled, as a Spark "
        "task's is), the kernels already loaded in the process; each side's best of "
        f"{args.rounds} processes x {args.repeat} batches, one thread, CPU milliseconds "
        "(`process_time`), the two sides taking turns."
    )
    lines = [
        *header(meta, "The CPU parser's fixed cost per batch, before and after", how),
        "| tree | 1 row | 256 rows | 256 rows' share of one large batch | fixed cost a batch |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {label} | {f['batch_1_ms']:.2f} ms | {f['batch_256_ms']:.2f} ms | "
        f"{f['share_of_large_per_256_ms']:.2f} ms | {f['fixed_per_batch_ms']:.2f} ms |"
        for label, f in figures.items()
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
