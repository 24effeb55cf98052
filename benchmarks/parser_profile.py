"""Where the parser's time goes, one thread: cProfile of the CPU backend's vectorised path on a
corpus of ``parser_throughput.py`` (the compiled kernels show as one entry each), and the cost
per row by batch size (a batch has a fixed cost: the columns are assembled node by node in
Python).

    .venv/bin/python benchmarks/parser_profile.py --corpus vllm --rows 20000
    .venv/bin/python benchmarks/parser_profile.py --smoke
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))

from parser_throughput import CONTENT_SCHEMA, corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="vllm")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.top = 400, 5
    import dspark_json
    from dspark_json.parse.cpu import CpuParser

    bodies = pa.array(corpus(args.rows, kind=args.corpus), pa.string())
    megabytes = sum(len(b) for b in bodies.to_pylist()) / 1e6
    one = CpuParser(dspark_json.response_schema(response_format=CONTENT_SCHEMA))
    one.vectorised.threads = 1
    one.parse_vectorised(bodies)  # compiled, or loaded from numba's cache
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        one.parse_vectorised(bodies)
        best = min(best, time.process_time() - started)
    print(f"{args.corpus}: {args.rows:,} bodies, {megabytes:.1f} MB, one thread: best of 5 "
          f"{best:.3f} CPU-s, {megabytes / best:.0f} MB/s")  # fmt: skip
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(3):
        one.parse_vectorised(bodies)
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())
    for size in sorted({min(n, args.rows) for n in (50, 200, 1000, 5000, args.rows)}):
        spent = float("inf")
        for _ in range(3):
            started = time.process_time()
            for lo in range(0, args.rows, size):
                one.parse_vectorised(bodies[lo : lo + size])
            spent = min(spent, time.process_time() - started)
        print(f"batches of {size:>6,}: {spent / args.rows * 1e6:6.1f} us of CPU a row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
