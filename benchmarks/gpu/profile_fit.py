"""Which functions run over the bodies' bytes on the GPU backend: a cProfile of
``GpuParser.parse`` with the fit kernel under numba's CUDA simulator and cuDF's reader stood in
for (tests/parse/gpu/stub.py: numbers in a string column as their text, as cuDF reads them),
over vLLM-shaped bodies that fit, each with a fractional score (``--score``). On the GPU path
the bytes of a fitting row are read by the device's fit kernel, the device's line gathering,
the reader (cuDF on a device) and the device's conversion of the doubles' text, and by nothing
else: the CPU scans (``scan_envelope_fit``, ``scan_content_fit``), the CPU's ``gather_lines``
and the reference parser (whose ``check_row`` would show) must not appear. Under the simulator the
"device" functions run as Python on the CPU; on a device they are kernels.

    .venv/bin/python benchmarks/gpu/profile_fit.py --rows 200 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
from pathlib import Path

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: Functions that read a row's bytes one by one (the CPU scans and line gathering, and the
#: rules the device runs): none may run on the host over fitting rows on the GPU path.
BYTE_FUNCTIONS = (
    "scan_envelope_fit",
    "scan_content_fit",
    "gather_lines",
    "check_row",
    "scan_string",
    "reader_hazards",
    "gather_row",
    "read_events",
    "double_row",
    "_double_of",
    "_decimal",
)


def _profile_threads() -> list[cProfile.Profile]:
    """Profile every thread started from now on (numba's simulator runs each device thread as
    a Python thread, which the main thread's profile does not see)."""
    import threading

    profiles: list[cProfile.Profile] = []
    run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.runcall(run, self)

    threading.Thread.run = profiled  # type: ignore[method-assign]
    return profiles


#: The simulator's own modules (by stem), left out of the tables.
_MACHINERY = {"threading", "kernel", "kernelapi", "contextlib", "devicearray"}


def _table(stats: pstats.Stats) -> list[tuple[float, float, int, str]]:
    """(tottime, cumtime, calls, function) by tottime, the simulator's machinery left out."""
    rows = []
    for (path, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        if Path(path).stem in _MACHINERY or "lock" in name or "importlib" in path:
            continue  # the simulator's threads, their waits, its module swaps and arrays
        rows.append((tottime, cumtime, calls, f"{Path(path).name}:{line}({name})"))
    return sorted(rows, reverse=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument(
        "--score", type=float, default=0.87, help="each body's score (a fraction: a double)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write gpu_profile.md there")
    args = parser.parse_args(argv)

    import pyarrow as pa

    from dspark_json.parse.gpu.parser import GpuParser
    from tests.parse import test_backend_conformance as conformance
    from tests.parse.gpu.stub import StandInLines

    schema = conformance.response_schema(response_format=conformance.CONTENT)
    good = conformance.GOOD | {"score": args.score}
    bodies = pa.array(
        [
            conformance.dumps(conformance.vllm_body(conformance.dumps(good | {"n": i})))
            for i in range(args.rows)
        ],
        pa.large_string(),
    )
    gpu = GpuParser(schema, lines=StandInLines())
    gpu.parse(bodies[:8])  # compile what compiles, outside the profile
    profile = cProfile.Profile()
    threads = _profile_threads()
    profile.enable()
    table = gpu.parse(bodies)
    profile.disable()
    host = _table(pstats.Stats(profile))
    device = _table(pstats.Stats(*threads)) if threads else []
    # On the host: none of the CPU's per-byte passes, nor the device's rules run on the CPU.
    byte_passes = [r[3] for r in host if any(f"({p})" in r[3] for p in BYTE_FUNCTIONS)]
    out = io.StringIO()
    out.write(
        f"GpuParser.parse of {table.num_rows} vLLM bodies ({bodies.nbytes:,} bytes), fit kernel "
        f"under the CUDA simulator, cuDF's reader stood in for (tests/parse/gpu/stub.py), score "
        f"{args.score}; doubles the host converted: {gpu.host_doubles}; reference rows: "
        f"{gpu.reference_rows} {gpu.reference_reasons}\n"
    )
    for title, rows in (
        ("On the device (the simulator's threads: each device thread a Python thread)", device),
        ("On the host (the main thread)", host),
    ):
        out.write(f"\n{title}\n\n| tottime s | cumtime s | calls | function |\n|---|---|---|---|\n")
        for tottime, cumtime, calls, name in rows[:16]:
            out.write(f"| {tottime:.3f} | {cumtime:.3f} | {calls} | `{name}` |\n")
    on_device = {
        p: sum(r[2] for r in device if f"({p})" in r[3]) for p in BYTE_FUNCTIONS
    }  # calls of each per-byte function on the device (the stand-in's reader aside)
    out.write(
        "\nPer-byte functions on the device (calls): "
        + ", ".join(f"{p} {n}" for p, n in on_device.items() if n)
        + "\n"
    )
    out.write(
        f"\nPer-byte functions on the host ({', '.join(BYTE_FUNCTIONS)}): {byte_passes or 'none'}\n"
    )
    text = out.getvalue()
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_profile.md").write_text(text)
    return 1 if byte_passes or gpu.reference_rows else 0


if __name__ == "__main__":
    raise SystemExit(main())
