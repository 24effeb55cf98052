"""Where the parser's time goes, one thread: cProfile of the CPU backend's vectorised path on a
corpus of ``parser_throughput.py`` (the compiled kernels show as one entry each), and the cost
per row by batch size (a batch has a fixed cost: the columns are assembled node by node in
Python).

With ``--perf``, Linux ``perf`` samples the parses instead, down to the compiled functions a
kernel calls (``scan_string``, ``_unescape_into``...: cProfile sees only the kernels Python
calls). perf names compiled code from ``/tmp/perf-<pid>.map``, which this script writes from
numba's compiled libraries; numba keeps no names for the machine code it loads from its cache,
so the kernels are compiled afresh (into a temporary cache: about a minute).

    .venv/bin/python benchmarks/parser_profile.py --corpus vllm --rows 20000
    .venv/bin/python benchmarks/parser_profile.py --corpus vllm --rows 20000 --perf
    .venv/bin/python benchmarks/parser_profile.py --smoke
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))

from parser_throughput import CONTENT_SCHEMA, corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="vllm")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--perf", action="store_true", help="sample with Linux perf instead")
    args = parser.parse_args(argv)
    if args.perf:  # before numba is imported: its cache holds no names for perf
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="dspark-json-profile-")
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
    if args.perf:
        print(perf_profile(lambda: one.parse_vectorised(bodies), args.top))
        return 0
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


def perf_map(path: Path) -> int:
    """Write perf's map of the compiled functions of this process (start, size, name per
    line) for the dspark_json kernels compiled so far, and the callees linked into them; how
    many were named."""
    from numba.core.registry import CPUDispatcher

    names: dict[int, str] = {}
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("dspark_json"):
            continue
        for value in list(vars(module).values()):
            if not isinstance(value, CPUDispatcher):
                continue
            for compiled in value.overloads.values():
                library = compiled.library
                defined = re.finditer(r'^define [^@]*@"?([^"(]+)"?\(', library.get_llvm_str(), re.M)
                for found in defined:
                    address = library.get_pointer_to_function(found.group(1))
                    if address:
                        names[address] = _demangled(found.group(1))
    starts = sorted(names)
    with path.open("w") as out:
        for here, after in zip(starts, [*starts[1:], starts[-1] + (1 << 16)], strict=True):
            out.write(f"{here:x} {min(after - here, 1 << 20):x} {names[here]}\n")
    return len(starts)


def _demangled(name: str) -> str:
    """numba's mangled name (``_ZN`` then the dotted path's parts, each length-prefixed, then
    the signature) as the dotted path, ``dspark_json.parse.json.decode._unescape_into``."""
    parts, at = [], 3 if name.startswith("_ZN") else 0
    while at < len(name) and name[at].isdigit():
        digits = re.match(r"\d+", name[at:])
        assert digits is not None
        at += len(digits.group())
        part = name[at : at + int(digits.group())]
        at += len(part)
        parts.append(part)
    return ".".join(parts) or name


def perf_profile(parse: Any, top: int, seconds: float = 10.0) -> str:
    """perf's shares of the samples of ``parse`` run for about ``seconds``, by function."""
    named = perf_map(Path(f"/tmp/perf-{os.getpid()}.map"))
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        record = subprocess.Popen(
            ["perf", "record", "-q", "-F", "1999", "-o", str(data), "-p", str(os.getpid())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # perf attached
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            parse()
        record.send_signal(2)  # SIGINT: perf writes its data and stops
        record.wait()
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--no-children", "--sort", "symbol", "--stdio"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    rows = [line for line in report.splitlines() if line.strip() and not line.startswith("#")]
    return f"perf, {named} compiled functions named; share of the samples:\n" + "\n".join(
        row.rstrip() for row in rows[:top]
    )


if __name__ == "__main__":
    sys.exit(main())
