"""What a short-lived Spark Python worker pays to import dspark-json (issue 55's start-up share).

Spark runs the data source's planning and commit calls (schema, partitions, latestOffset, commit:
``pyspark.sql.worker.*``) in a Python process per call; each unpickles the source's class (by
reference: it imports ``dspark_json.source`` or ``pyspark_dspark_json``) and so imports the
package. For each entry point, in a fresh interpreter per measurement: the wall and CPU time of
the import alone (from a bare interpreter) and on top of the modules Spark's planning workers
import anyway (:data:`FLOOR`), the modules it adds, and which heavy ones (numba, httpx, ...) it
pulls in. Checkouts (``--tree``, several) are measured in turns, each with
``PYTHONPATH=<tree>``; medians of ``--repeat`` rounds.

    .venv/bin/python benchmarks/import_time.py --tree /tmp/before --tree . --repeat 7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

#: What Spark's planning and commit workers import before they unpickle the source.
FLOOR = (
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.commit_data_source_write",
    "pyspark.sql.streaming.python_streaming_source_runner",
)

ENTRY_POINTS = (
    "dspark_json",
    "dspark_json.source",
    "dspark_json.delta.sink",
    "pyspark_dspark_json",
    "pyspark_dspark_delta",
)

HEAVY = ("numba", "httpx", "jsonschema", "deltalake", "pyarrow.compute", "pandas", "pyarrow")

_PROBE = """
import importlib, json, sys, time
floor = {floor!r}
for name in floor:
    importlib.import_module(name)
before = set(sys.modules)
t0, c0 = time.perf_counter(), time.process_time()
importlib.import_module({module!r})
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
added = set(sys.modules) - before
print(json.dumps({{"seconds": seconds, "cpu": cpu, "modules": len(added),
    "heavy": [h for h in {heavy!r} if h in added]}}))
"""


def probe(tree: Path, module: str, floor: tuple[str, ...]) -> dict[str, object]:
    """One fresh interpreter: import ``floor``, then time ``module``'s import."""
    code = _PROBE.format(floor=floor, module=module, heavy=HEAVY)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", action="append", type=Path, help="checkout (repeatable)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    args = parser.parse_args()
    trees = [t.resolve() for t in (args.tree or [Path(__file__).resolve().parents[1]])]
    runs: dict[tuple[str, str, str], list[dict[str, object]]] = {}
    for _ in range(args.repeat):
        for module in ENTRY_POINTS:
            for setting, floor in (("alone", ()), ("on Spark's worker", FLOOR)):
                for tree in trees:  # side by side: the trees in turns
                    key = (str(tree), module, setting)
                    runs.setdefault(key, []).append(probe(tree, module, floor))
    print(
        "| tree | module | setting | wall ms (median) | range ms | CPU ms (median) | "
        "modules added | heavy |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|")
    table = []
    for (tree, module, setting), results in runs.items():
        ms = [float(str(r["seconds"])) * 1000 for r in results]
        cpu = [float(str(r["cpu"])) * 1000 for r in results]
        row = {
            "tree": tree,
            "module": module,
            "setting": setting,
            "median_ms": statistics.median(ms),
            "min_ms": min(ms),
            "max_ms": max(ms),
            "cpu_median_ms": statistics.median(cpu),
            "modules": results[0]["modules"],
            "heavy": results[0]["heavy"],
        }
        table.append(row)
    for row in sorted(table, key=lambda r: (r["module"], r["setting"], r["tree"])):
        heavy = ", ".join(row["heavy"]) or "-"  # type: ignore[arg-type]
        print(
            f"| {row['tree']} | `{row['module']}` | {row['setting']} | {row['median_ms']:.0f} | "
            f"{row['min_ms']:.0f}-{row['max_ms']:.0f} | {row['cpu_median_ms']:.0f} | "
            f"{row['modules']} | {heavy} |"
        )
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
