"""Live progress: is the ETA right, and what do the progress records cost?

    .venv/bin/python benchmarks/progress.py            # writes results/progress.{md,json}
    .venv/bin/python benchmarks/progress.py --smoke    # tiny sizes

The issue's done-when scenario: a simulator answering in ``--latency`` seconds (1 s), an
``availableNow`` run of ``--prompts`` (2,000) prompts in one micro-batch (``partitionSize`` 1000:
two tasks, ``maxConcurrency`` ``--concurrency``), into Delta, with option ``metrics``. While it
runs, ``dspark-json metrics DIR --json`` is sampled every ``--every`` seconds (the command's own
code, :func:`dspark_json.cli.main`, in this process); the sample at half-way gives an ETA,
compared with the time the run actually took from there to its last prompt.

The cost: the same stream with the progress records on and off (``DSPARK_JSON_NO_PROGRESS=1``:
no timer thread, no usage read from the answers), ``--rounds`` times each, alternated, each run
in a fresh process and Spark session (the variable must be there before Spark's Python workers
start). The figure is the CPU seconds of Spark's Python processes (the data source's workers and
their daemon: utime + stime of the live ones, and what the daemon collected of those that
ended), read from /proc before and after the query.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

RESULTS = Path(__file__).parent / "results"
TICKS = os.sysconf("SC_CLK_TCK")


def _python_descendants(root: int) -> list[int]:
    """The Python processes under ``root`` (Spark's JVM): its daemon and workers."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            todo.append(child)
            try:
                command = (Path("/proc") / str(child) / "cmdline").read_bytes()
            except OSError:
                continue
            if b"python" in command:
                found.append(child)
    return found


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return total / TICKS


def _jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._jvm.ProcessHandle.current().pid())


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One run, in this process: the stream, the samples, the CPU."""
    import dspark_json
    from dspark_json.cli import main
    from dspark_json.dev.local import SimulatorProcess, local_spark
    from dspark_json.dev.samples import write_sample_prompts

    with TemporaryDirectory() as tmp, SimulatorProcess(latency=args.latency) as server:
        work = Path(tmp)
        write_sample_prompts(work / "prompts", args.prompts, files=1)
        spark = local_spark("progress benchmark")
        dspark_json.register(spark)
        metrics = str(work / "metrics")
        df = (
            spark.readStream.format("dspark-json")
            .option("endpoint", server.url)
            .option("prompts", str(work / "prompts"))
            .option("responseFormat", str(_schema_file(work)))
            .option("partitionSize", str(max(args.prompts // 2, 1)))
            .option("maxConcurrency", str(args.concurrency))
            .option("metrics", metrics)
            .option("pricing", '{"*": {"input": 0.2, "output": 0.6, "cached_input": 0.05}}')
            .load()
        )
        spark.range(1).collect()  # the JVM and its Python daemon up before the CPU is read
        jvm = _jvm_pid(spark)
        before = _cpu_seconds(_python_descendants(jvm))
        pids_seen: set[int] = set(_python_descendants(jvm))
        samples: list[dict[str, Any]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    main(["metrics", metrics, "--json"])
                shot = json.loads(out.getvalue())
                samples.append({"t": time.time(), **shot})
                pids_seen.update(_python_descendants(jvm))
                stop.wait(args.every)

        started = time.time()
        query = dspark_json.write_delta(
            df,
            str(work / "table"),
            checkpoint=str(work / "_ckpt"),
            trigger={"availableNow": True},
        )
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        query.awaitTermination()
        ended = time.time()
        stop.set()
        sampler.join()
        after = _cpu_seconds(_python_descendants(jvm))
        final = samples[-1] if samples else {}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["metrics", metrics, "--json"])
        final = json.loads(out.getvalue())
        spark.stop()
    return {
        "progress": os.environ.get("DSPARK_JSON_NO_PROGRESS") != "1",
        "wall_seconds": round(ended - started, 2),
        "python_cpu_seconds": round(after - before, 2),
        "final": final,
        "samples": [
            {
                "t": round(s["t"] - started, 2),
                "done": s["prompts"]["done"],
                "total": s["prompts"]["total"],
                "eta_seconds": s["eta_seconds"],
                "rows_per_second": s["rows_per_second"],
                "state": s["state"],
            }
            for s in samples
        ],
    }


def _schema_file(work: Path) -> Path:
    from importlib import resources

    path = work / "review_schema.json"
    path.write_text(
        resources.files("dspark_json").joinpath("examples/review_schema.json").read_text()
    )
    return path


def eta_check(run: dict[str, Any]) -> dict[str, Any] | None:
    """The ETA at half-way against the time the run took from there to its last prompt."""
    samples = run["samples"]
    total = run["final"]["prompts"]["total"]
    half = next((s for s in samples if total and s["done"] >= total / 2 and s["eta_seconds"]), None)
    last = next((s for s in samples if total and s["done"] >= total), None)
    if half is None or last is None:
        return None
    actual = last["t"] - half["t"]
    return {
        "at_seconds": half["t"],
        "done": half["done"],
        "total": total,
        "eta_seconds": half["eta_seconds"],
        "actual_remaining_seconds": round(actual, 1),
        "ratio": round(half["eta_seconds"] / actual, 2) if actual > 0 else None,
    }


def direct_costs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The progress's own CPU, measured piece by piece in this process (thread CPU time, so
    other processes' load does not count): one task record written (the record made from the
    client's counts, and written through fs.write_atomic), and the usage read from one answer
    (the tally with a progress record vs without); times the writes and answers of a run."""
    from dspark_json import progress
    from dspark_json.http.client import _Tally
    from dspark_json.records import watch, watching
    from dspark_json.storage import ENVIRONMENT_ONLY

    class Run:
        def __init__(self) -> None:
            self.stats = _Tally(live=True)
            self.stats.statuses.update({"200": 900, "429": 3})
            self.stats.model_requests.update({"dspark-sim": 903})
            self.gate, self.limits, self.limit = None, {}, None

    with TemporaryDirectory() as tmp:
        task = progress._Task(
            tmp, ENVIRONMENT_ONLY, batch=0, partition=0, prompts=1000, model="m", pricing=None
        )
        watching(task.watch)
        watch(Run())
        watching(None)
        writes = 200
        started = time.thread_time()
        for _ in range(writes):
            task.write()
        per_write = (time.thread_time() - started) / writes
    body = (
        b'{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"dspark-sim",'
        b'"choices":[{"index":0,"message":{"role":"assistant","content":"{\\"sentiment\\":'
        b'\\"positive\\",\\"score\\":0.9}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":'
        b'31,"total_tokens":43,"completion_tokens":12,"prompt_tokens_details":null}}'
    )
    answers = 20000
    per_answer = {}
    for live in (True, False):
        tally = _Tally(live=live)
        started = time.thread_time()
        for _ in range(answers):
            tally.answered("dspark-sim", 0.1, body)
        per_answer[live] = (time.thread_time() - started) / answers
    scan = max(per_answer[True] - per_answer[False], 0.0)
    on = [r for r in runs if r["progress"]]
    # A task writes every 2 s while it runs, and once at its end.
    task_seconds = [
        max(s["t"] for s in r["samples"] if s["done"] < r["final"]["prompts"]["total"])
        - min((s["t"] for s in r["samples"] if s["done"] > 0), default=0.0)
        for r in on
    ]
    tasks = max(r["final"]["tasks"]["done"] for r in on) if on else 2
    writes_per_run = tasks * (max(task_seconds, default=0.0) / progress.INTERVAL + 1)
    prompts = on[0]["final"]["prompts"]["total"] if on else 0
    estimate = writes_per_run * per_write + prompts * scan
    off = [r["python_cpu_seconds"] for r in runs if not r["progress"]]
    return {
        "per_write_ms": round(per_write * 1000, 3),
        "per_answer_scan_us": round(scan * 1e6, 2),
        "writes_per_run": round(writes_per_run),
        "progress_cpu_seconds_per_run": round(estimate, 4),
        "share_of_stream_pct": round(estimate / (sum(off) / len(off)) * 100, 3) if off else None,
    }


def run_child(args: argparse.Namespace, progress: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("DSPARK_JSON_NO_PROGRESS", None)
    if not progress:
        env["DSPARK_JSON_NO_PROGRESS"] = "1"
    command = [
        sys.executable,
        __file__,
        "--child",
        "--prompts",
        str(args.prompts),
        "--latency",
        str(args.latency),
        "--concurrency",
        str(args.concurrency),
        "--every",
        str(args.every),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child", action="store_true")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the runs of --out's progress.json"
    )
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if args.smoke:
        args.prompts, args.latency, args.rounds, args.every = 40, 0.2, 1, 0.5
    if args.child:
        sys.stdout.write(json.dumps(child(args)) + "\n")
        return
    runs = []
    if args.reuse:  # the runs of an earlier result: only the direct costs measured again
        runs = json.loads((Path(args.out) / "progress.json").read_text())["runs"]
    else:
        for _ in range(args.rounds):
            for progress in (False, True):
                runs.append(run_child(args, progress))
    on = [r for r in runs if r["progress"]]
    off = [r for r in runs if not r["progress"]]
    cpu_on = sum(r["python_cpu_seconds"] for r in on) / len(on)
    cpu_off = sum(r["python_cpu_seconds"] for r in off) / len(off)
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, loaded (other sessions ran)",
        "prompts": args.prompts,
        "latency_s": args.latency,
        "max_concurrency": args.concurrency,
        "eta": [eta_check(r) for r in on],
        "cpu": {
            "progress_on_s": round(cpu_on, 2),
            "progress_off_s": round(cpu_off, 2),
            "overhead_pct": round((cpu_on - cpu_off) / cpu_off * 100, 2) if cpu_off else None,
        },
        "direct": direct_costs(runs),
        "runs": runs,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "progress.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "progress.md").write_text(_markdown(result))


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Live progress: the ETA, and what the progress records cost",
        "",
        f"`benchmarks/progress.py`, {result['when']}, {result['machine']}. A simulator "
        f"answering in {result['latency_s']} s, an availableNow run of {result['prompts']} "
        f"prompts in one micro-batch (two tasks, maxConcurrency {result['max_concurrency']}), "
        "into Delta, option `metrics` set; `dspark-json metrics DIR --json` sampled during the "
        "run. Timings taken on a loaded, shared machine (2 cores, other sessions running): "
        "read the ratios, not the absolute figures.",
        "",
        "## The ETA at half-way",
        "",
        "| run | at (s) | done / total | ETA (s) | actual remaining (s) | ETA / actual |",
        "|---|---|---|---|---|---|",
    ]
    for i, eta in enumerate(result["eta"]):
        if eta is None:
            lines.append(f"| {i + 1} | - | - | - | - | no half-way sample |")
            continue
        lines.append(
            f"| {i + 1} | {eta['at_seconds']} | {eta['done']} / {eta['total']} | "
            f"{eta['eta_seconds']} | {eta['actual_remaining_seconds']} | {eta['ratio']} |"
        )
    cpu, direct = result["cpu"], result["direct"]
    lines += [
        "",
        "## The CPU cost of the progress records",
        "",
        "CPU seconds of Spark's Python processes (the tasks, the stream reader), the same stream "
        "with the progress records on and off (`DSPARK_JSON_NO_PROGRESS=1`), runs alternated, "
        "each in a fresh process:",
        "",
        "| run | progress | wall (s) | Python CPU (s) |",
        "|---|---|---|---|",
    ]
    for i, run in enumerate(result["runs"]):
        lines.append(
            f"| {i + 1} | {'on' if run['progress'] else 'off'} | {run['wall_seconds']} | "
            f"{run['python_cpu_seconds']} |"
        )
    lines += [
        "",
        f"Mean: on {cpu['progress_on_s']} s, off {cpu['progress_off_s']} s "
        f"({cpu['overhead_pct']}%): the difference is within the noise of a loaded machine "
        "(runs of one setting differ by more), so the cost is also measured directly:",
        "",
        "## The progress's own CPU, measured directly",
        "",
        "Thread CPU time in one process (other processes' load does not count): one task record "
        "made from the client's counts and written through `fs.write_atomic` (local disk), and "
        "the usage read from one answer (the client's tally with a progress record, minus "
        "without), times the writes (every 2 s per task while it runs, and once at its end) "
        "and the answers of the run above:",
        "",
        "| one record written | usage read per answer | writes per run | progress CPU per run "
        "| share of the stream's Python CPU |",
        "|---|---|---|---|---|",
        f"| {direct['per_write_ms']} ms | {direct['per_answer_scan_us']} us | "
        f"{direct['writes_per_run']} | {direct['progress_cpu_seconds_per_run']} s | "
        f"**{direct['share_of_stream_pct']}%** |",
        "",
        "On an object store a record is one PUT (a request's worth of CPU, every 2 s per task).",
        "",
        "Reproduce: `.venv/bin/python benchmarks/progress.py` (about 10 minutes).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
