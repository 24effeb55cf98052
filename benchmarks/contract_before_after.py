"""Issue 44 before and after: the parser benchmark and the stream benchmark on two checkouts,
taking turns in one run (before, after, before, after, ...), CPU time first.

    .venv/bin/python benchmarks/contract_before_after.py --before /work/wt-before
    .venv/bin/python benchmarks/contract_before_after.py --before B --after A --pairs 3
    .venv/bin/python benchmarks/contract_before_after.py --smoke    # the tests run it

Each side runs in a process of its own with ``PYTHONPATH=<its checkout>`` and the working
directory outside both trees, so ``import dspark_json`` resolves to that checkout (the process
checks it and fails if not); the benchmark code is this tree's copy on both sides:

- **parser**: ``parser_throughput.contenders`` without Spark (``--no-spark``) on its ``vllm``
  corpus: the CPU backend with every column, with Spark's columns, and the two ``orjson``
  contenders, which run no dspark-json parse code and so show the machine's noise. Each
  contender runs once to warm up, then ``--repeat`` times in rounds; the process's CPU time
  (``process_time``, all threads) and wall, median per process.
- **stream**: the stream of ``report.py`` (sample prompts -> the simulator, latency 0 -> the
  source -> ``write_delta``, availableNow) in local Spark on two cores: a warm-up query, then
  ``--stream-runs`` queries; per query the wall and the CPU of the process tree (driver, JVM,
  Python workers) without the simulator, whose CPU is given apart.

``DSPARK_JSON_KEEP_MEMORY=1`` on both sides (before kept freed memory on import; after does only
when asked); then one pair of the after tree with it and without it (the default). Writes
``results/contract_before_after.{md,json}``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
KEEP = "DSPARK_JSON_KEEP_MEMORY"


# ---------------------------------------------------------------------------------- children
def _check_tree(tree: str) -> None:
    """Fail unless ``dspark_json`` comes from ``tree``: a figure of the wrong tree is worse than
    none."""
    import dspark_json

    where = Path(dspark_json.__file__).resolve()
    if not where.is_relative_to(Path(tree).resolve()):
        raise SystemExit(f"dspark_json imported from {where}, not from {tree}: check PYTHONPATH")


def _arrow_schema_shim() -> None:
    """Before issue 44, ``arrow_schema`` lived in ``parse.convert``; the benchmark imports it
    from ``response.convert``. Alias the old module so the same benchmark code runs on both."""
    try:
        import dspark_json.response.convert  # noqa: F401
    except ImportError:
        # The before tree's module: joined, as it no longer exists (tests/test_references.py
        # holds every dotted name the scripts spell to one that does).
        old = importlib.import_module(".".join(("dspark_json", "parse", "convert")))
        package = types.ModuleType("dspark_json.response")
        package.convert = old  # type: ignore[attr-defined]
        sys.modules["dspark_json.response"] = package
        sys.modules["dspark_json.response.convert"] = old


def child_parser(args: argparse.Namespace) -> dict[str, Any]:
    """The parser benchmark's in-process contenders, CPU and wall per run."""
    sys.path.insert(0, str(HERE))
    _arrow_schema_shim()
    from parser_throughput import contenders, corpus

    bodies = corpus(args.rows, kind="vllm")
    options = argparse.Namespace(no_spark=True, rows=args.rows, partitions=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bodies" / "bodies.jsonl"
        path.parent.mkdir()
        path.write_text("".join(b + "\n" for b in bodies))
        entries = list(contenders(bodies, path, options, Path(tmp)))
        for _, run, _ in entries:
            run()  # warm-up: kernels loaded, buffers grown
        cpu: list[list[float]] = [[] for _ in entries]
        wall: list[list[float]] = [[] for _ in entries]
        for _ in range(args.repeat):
            for i, (_, run, _) in enumerate(entries):
                c, w = time.process_time(), time.perf_counter()
                run()
                cpu[i].append(time.process_time() - c)
                wall[i].append(time.perf_counter() - w)
        rows = [count() for _, _, count in entries]
    return {
        name: {
            "cpu_s": statistics.median(cpu[i]),
            "wall_s": statistics.median(wall[i]),
            "content_parsed": rows[i],
        }
        for i, (name, _, _) in enumerate(entries)
    }


class TreeCpu:
    """CPU seconds of this process and its descendants while running, the simulator apart.

    Each process's own user + system time is sampled every ``every`` seconds (keyed by pid and
    start time), so a Python worker that ends mid-query still counts up to its last sample; a
    parent's ``children_*`` times are not summed, since not every parent reaps its children.
    """

    def __init__(self, every: float = 0.1) -> None:
        self.every = every
        self.first: dict[tuple[int, float], float] = {}
        self.last: dict[tuple[int, float], tuple[float, bool]] = {}
        self._running = False  # processes first seen once running started with it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        import psutil  # type: ignore[import-untyped]

        me = psutil.Process()
        for process in [me, *me.children(recursive=True)]:
            try:
                with process.oneshot():
                    key = (process.pid, process.create_time())
                    times = process.cpu_times()
                    simulator = "simulate" in process.cmdline()
            except psutil.Error:
                continue  # gone between the listing and the read
            seconds = times.user + times.system
            self.first.setdefault(key, 0.0 if self._running else seconds)
            self.last[key] = (seconds, simulator)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def __enter__(self) -> TreeCpu:
        self._sample()  # the baseline of the processes alive at the start
        self._running = True
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def seconds(self) -> tuple[float, float]:
        """(ours, the simulator's)."""
        ours = simulator = 0.0
        for key, (seconds, is_simulator) in self.last.items():
            spent = seconds - self.first.get(key, 0.0)
            if is_simulator:
                simulator += spent
            else:
                ours += spent
        return ours, simulator


def child_stream(args: argparse.Namespace) -> dict[str, Any]:
    """The report's stream into Delta (latency 0), wall and CPU of the process tree per query."""
    sys.path.insert(0, str(HERE))
    _arrow_schema_shim()  # report imports parser_throughput, which imports response.convert
    from report import stream_source, write_stream

    import dspark_json
    from dspark_json.dev.local import SimulatorProcess, local_spark
    from dspark_json.dev.samples import write_sample_prompts

    schema = (Path(dspark_json.__file__).parent / "examples" / "review_schema.json").read_text()
    spark = local_spark("dspark-json contract before/after")
    dspark_json.register(spark)
    workers = spark.sparkContext.parallelize([0, 1], 2).map(
        lambda _: str(__import__("dspark_json").__file__)
    )
    seen = sorted(set(workers.collect()))
    checkout = Path(str(args.tree)).resolve()
    if not all(Path(f).resolve().is_relative_to(checkout) for f in seen):
        raise SystemExit(f"Spark's Python workers import {seen}, not {args.tree}")
    cpu, wall, sim = [], [], []
    try:
        with tempfile.TemporaryDirectory() as tmp, SimulatorProcess(latency=0.0) as server:
            work = Path(tmp)
            write_sample_prompts(work / "prompts", args.prompts)
            write_sample_prompts(work / "warm", 20)
            for i in range(args.stream_runs + 1):
                prompts, run = work / ("warm" if i == 0 else "prompts"), work / f"run-{i}"
                df = stream_source(
                    spark, server.url, prompts, schema, concurrency=args.concurrency, run=run
                )
                with TreeCpu() as tree:
                    seconds = write_stream(df, run)
                ours, served = tree.seconds()
                if i == 0:
                    continue  # warm-up: Python workers, numba's cache, the JIT
                wall.append(seconds)
                cpu.append(ours)
                sim.append(served)
    finally:
        spark.stop()
    return {
        f"stream, {args.prompts} prompts, latency 0, maxConcurrency {args.concurrency}": {
            "cpu_s": statistics.median(cpu),
            "wall_s": statistics.median(wall),
            "simulator_cpu_s": statistics.median(sim),
        }
    }


# ------------------------------------------------------------------------------ orchestrator
def run_side(tree: Path, kind: str, args: argparse.Namespace, keep: bool) -> dict[str, Any]:
    """One child process of ``kind`` on ``tree``; its figures, the load and its CPU in all."""
    env = {k: v for k, v in os.environ.items() if k not in (KEEP, "PYTHONPATH")}
    env["PYTHONPATH"] = str(tree)
    if keep:
        env[KEEP] = "1"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        kind,
        "--tree",
        str(tree),
        "--rows",
        str(args.rows),
        "--repeat",
        str(args.repeat),
        "--prompts",
        str(args.prompts),
        "--stream-runs",
        str(args.stream_runs),
        "--concurrency",
        str(args.concurrency),
    ]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as cwd:  # not a tree: '' on sys.path must not win
        done = subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800, check=False
        )
    if done.returncode != 0:
        raise SystemExit(f"{kind} on {tree} failed:\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return {"figures": figures, "load_1min": [load_before, os.getloadavg()[0]]}


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(runs: list[dict[str, Any]], a: str, b: str) -> list[dict[str, Any]]:
    """Per benchmark figure: side ``a`` against side ``b``, medians of the processes' medians."""
    names = [n for n in runs[0]["figures"] if any(r["side"] == a for r in runs)]
    rows = []
    for name in names:
        row: dict[str, Any] = {"name": name}
        for side in (a, b):
            mine = [r["figures"][name] for r in runs if r["side"] == side]
            row[side] = {key: _spread([m[key] for m in mine]) for key in mine[0]}
        for key in ("cpu_s", "wall_s"):
            x, y = row[a][key], row[b][key]
            row[f"{key}_ratio"] = y["median"] / x["median"]
            row[f"{key}_overlap"] = y["min"] <= x["max"] and x["min"] <= y["max"]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="the checkout before (default: this tree)")
    parser.add_argument("--after", type=Path, default=ROOT, help="default: this tree")
    parser.add_argument("--pairs", type=int, default=3, help="before/after turns")
    parser.add_argument("--rows", type=int, default=20_000, help="parser corpus rows")
    parser.add_argument("--repeat", type=int, default=5, help="parser runs per process")
    parser.add_argument("--prompts", type=int, default=1000, help="prompts per stream query")
    parser.add_argument("--stream-runs", type=int, default=2, help="stream queries per process")
    parser.add_argument("--concurrency", type=int, default=64, help="maxConcurrency")
    parser.add_argument("--no-stream", action="store_true", help="the parser benchmark only")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, parser only (tests)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", choices=("parser", "stream"), help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _check_tree(args.tree)
        figures = child_parser(args) if args.child == "parser" else child_stream(args)
        print(json.dumps(figures))
        return 0
    if args.smoke:
        args.pairs, args.rows, args.repeat, args.no_stream = 1, 300, 1, True
    before, after = (args.before or ROOT).resolve(), args.after.resolve()
    kinds = ["parser"] + ([] if args.no_stream else ["stream"])
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/contract_before_after.py " + " ".join(argv or sys.argv[1:]),
        "before": str(before),
        "after": str(after),
        "commits": {side: _commit(tree) for side, tree in (("before", before), ("after", after))},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "benchmarks": {},
    }
    for kind in kinds:
        runs = []
        for turn in range(args.pairs):
            for side, tree in (("before", before), ("after", after)):
                result = run_side(tree, kind, args, keep=True)
                runs.append({"side": side, "turn": turn, **result})
                print(f"{kind} {side} {turn}: {json.dumps(result)}", flush=True)
        default = []
        for side, keep in (("after, memory kept", True), ("after, default", False)):
            result = run_side(after, kind, args, keep=keep)
            default.append({"side": side, "turn": 0, **result})
            print(f"{kind} {side}: {json.dumps(result)}", flush=True)
        report["benchmarks"][kind] = {
            "runs": runs,
            "summary": summarise(runs, "before", "after"),
            "default_memory_runs": default,
            "default_memory": summarise(default, "after, memory kept", "after, default"),
        }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "contract_before_after.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "contract_before_after.md").write_text(render(report))
    print(render(report))
    return 0


def _commit(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def _cell(figure: dict[str, float]) -> str:
    return f"{figure['median']:.3f} ({figure['min']:.3f}-{figure['max']:.3f})"


def render(report: dict[str, Any]) -> str:
    """The results as Markdown: per figure, CPU and wall medians with their ranges, the ratio."""
    lines = [
        "# Issue 44 before and after (`contract_before_after.py`)",
        "",
        f"`{report['command']}`, {report['when']}; before = `{report['commits']['before']}`, "
        f"after = `{report['commits']['after']}`; {report['machine']['cpus']} CPUs, "
        f"Python {report['machine']['python']}.",
        "",
        "Seconds: median of the processes' medians (range across processes); ratio = after / "
        "before; `yes` where the two ranges overlap.",
    ]
    for kind, part in report["benchmarks"].items():
        loads = [x for r in part["runs"] for x in r["load_1min"]]
        lines += [
            "",
            f"## {kind} (load average, 1 min: {min(loads):.1f}-{max(loads):.1f})",
            "",
            "| figure | before CPU s | after CPU s | CPU ratio | overlap | before wall s "
            "| after wall s | wall ratio |",
            "|---|---|---|---:|---|---|---|---:|",
        ]
        for row in part["summary"]:
            lines.append(
                f"| {row['name']} | {_cell(row['before']['cpu_s'])} | "
                f"{_cell(row['after']['cpu_s'])} | {row['cpu_s_ratio']:.3f} | "
                f"{'yes' if row['cpu_s_overlap'] else 'no'} | {_cell(row['before']['wall_s'])} | "
                f"{_cell(row['after']['wall_s'])} | {row['wall_s_ratio']:.3f} |"
            )
        lines += [
            "",
            "Turns, in order (CPU s): "
            + "; ".join(
                f"{r['side']} " + ", ".join(f"{v['cpu_s']:.3f}" for v in r["figures"].values())
                for r in part["runs"]
            ),
            "",
            f"After, `{KEEP}=1` against the default (unset), one pair:",
            "",
            "| figure | kept CPU s | default CPU s | CPU ratio | kept wall s | default wall s |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in part["default_memory"]:
            kept, default = row["after, memory kept"], row["after, default"]
            lines.append(
                f"| {row['name']} | {kept['cpu_s']['median']:.3f} | "
                f"{default['cpu_s']['median']:.3f} | {row['cpu_s_ratio']:.3f} | "
                f"{kept['wall_s']['median']:.3f} | {default['wall_s']['median']:.3f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
