"""The CPU cost of an answer, end to end: prompts -> the source -> the simulator -> Arrow ->
(journal) -> Delta, as rows per CPU-second of *our* processes.

One Spark session (local[2] by default) in this process streams ``--prompts`` sample prompts
through ``format("dspark-json")`` into a Delta table (``write_delta``, trigger availableNow),
against a simulator that answers at once. The CPU seconds counted are those of this process
(the driver's Python), Spark's JVM and its Python workers (the whole process tree), less the
simulator's: the model server's CPU is not the client's cost. Runs alternate journal on and
off, after one warm-up run each (Python workers, numba's cache, the JIT), and the best of
``--repeat`` counts.

With ``--profile DIR``, the benchmark then runs once more per setting under py-spy (the driver
and every Python worker, ``--subprocesses``; ``pip install py-spy``): the collapsed stacks go to
``DIR``, the shares by stage and the top functions to the results.

    .venv/bin/python benchmarks/end_to_end_cpu.py                   # results/end_to_end_cpu.*
    .venv/bin/python benchmarks/end_to_end_cpu.py --profile /tmp/p  # and the stage shares
    .venv/bin/python benchmarks/end_to_end_cpu.py --smoke --out /tmp/e2e  # a minute
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).parent))
#: The checkout whose dspark_json is measured: this one, or ``DSPARK_TREE`` (another checkout,
#: e.g. a worktree of main, measured side by side with this script; its Python workers get it
#: through ``PYTHONPATH``, which the caller sets to the same directory).
TREE = os.environ.get("DSPARK_TREE") or str(Path(__file__).resolve().parents[1])
sys.path.insert(0, TREE)

from parser_throughput import machine  # noqa: E402  (after TREE is on the path)

RESULTS = Path(__file__).parent / "results"

#: Stages of the path, by the first frame of a sampled stack that names one (file fragments,
#: checked in this order: the innermost stage a sample is in wins).
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("parse (bodies -> Arrow)", ("dspark_json/parse/", "dspark_json/buffers/")),
    ("journal", ("dspark_json/inputs/journal.py",)),
    ("HTTP client (httpx, h11, sockets)", ("dspark_json/http/", "httpx/", "httpcore/", "h11/")),
    ("requests (prompt -> body)", ("dspark_json/bodies.py", "dspark_json/generation.py")),
    ("prompt files (listing, reading)", ("dspark_json/inputs/",)),
    ("metrics", ("dspark_json/metrics.py",)),
    ("Delta (commit, log)", ("dspark_json/delta/", "deltalake/")),
    ("pipeline (partition work)", ("dspark_json/pipeline.py", "dspark_json/source.py")),
    ("Arrow hand-off to Spark (pyspark serialisers, worker)", ("pyspark/",)),
)


class TreeCpu:
    """CPU seconds of this process's tree but ``exclude`` (pids), polled so that processes
    that start and end within the window are counted with their last seen times."""

    def __init__(self, exclude: set[int], *, poll: bool = True) -> None:
        self.exclude = exclude
        self.poll = poll
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.kinds: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _tree(self) -> list[psutil.Process]:
        me = psutil.Process()
        return [me, *me.children(recursive=True)]

    def _sample(self) -> None:
        for p in self._tree():
            if p.pid in self.exclude:
                continue
            try:
                t = p.cpu_times()
                seconds = t.user + t.system
                if p.pid not in self.kinds:
                    name = " ".join(p.cmdline()[:3])
                    self.kinds[p.pid] = _kind(name, p.pid)
            except psutil.Error:
                continue
            self.first.setdefault(p.pid, seconds)
            self.last[p.pid] = seconds

    def _poll(self) -> None:
        while not self._stop.wait(0.1):
            self._sample()

    def __enter__(self) -> TreeCpu:
        self._sample()
        self.started = set(self.first)
        if self.poll:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.poll:
            self._thread.join()
        self._sample()

    def by_kind(self) -> dict[str, float]:
        """CPU seconds in the window by kind of process (``jvm``, ``python worker``,
        ``driver``); a process born in the window counts from zero."""
        out: Counter[str] = Counter()
        for pid, last in self.last.items():
            base = self.first[pid] if pid in self.started else 0.0
            out[self.kinds.get(pid, "other")] += last - base
        return dict(out)


def _kind(cmdline: str, pid: int) -> str:
    if pid == os.getpid():
        return "driver (Python)"
    if "java" in cmdline:
        return "Spark JVM"
    if "python" in cmdline.lower():
        return "Python workers"
    return "other"


def write_prompts(directory: Path, rows: int) -> None:
    from dspark_json.dev.samples import write_sample_prompts

    write_sample_prompts(directory, rows, files=4)


def run_once(
    spark: Any,
    url: str,
    prompts: Path,
    run: Path,
    schema: str,
    *,
    journal: bool,
    concurrency: int,
    partition_size: int | None = None,
) -> float:
    import dspark_json

    reader = (
        spark.readStream.format("dspark-json")
        .option("endpoint", url)
        .option("prompts", str(prompts))
        .option("responseFormat", schema)
        .option("maxConcurrency", str(concurrency))
    )
    if partition_size is not None:
        reader = reader.option("partitionSize", str(partition_size))
    if journal:
        reader = reader.option("journal", str(run / "journal"))
    started = time.perf_counter()
    dspark_json.write_delta(
        reader.load(),
        str(run / "table"),
        checkpoint=str(run / "checkpoint"),
        trigger={"availableNow": True},
    ).awaitTermination()
    return time.perf_counter() - started


def table_rows(path: Path) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(str(path)).to_pyarrow_dataset().count_rows())


def profiled(args: argparse.Namespace, journal: str, out: Path) -> None:
    """This benchmark, one round with the journal ``journal``, run under py-spy (the driver and
    every Python process below it: ``--subprocesses``) into ``out`` (collapsed stacks). Launched
    under py-spy, not attached: a container's ptrace rules let it trace its own descendants
    only. The samples include the warm-up run and the Python side's start (imports)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    command = [exe, "record", "--subprocesses", "--rate", "100", "--format", "raw",
               "--output", str(out), "--", sys.executable, __file__, "--journal", journal,
               "--no-poll", *(["--preload"] if args.preload else []),
               *(["--compiled-pyspark"] if args.compiled_pyspark else []),
               *(["--as-is"] if args.as_is else []),
               "--prompts", str(args.prompts), "--repeat", "1", "--cores", str(args.cores),
               "--warm-prompts", str(args.warm_prompts),
               *(["--partition-size", str(args.partition_size)] if args.partition_size else []),
               "--concurrency", str(args.concurrency),
               "--out", str(out.parent / "figures")]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _busy_samples(collapsed: Path) -> Iterator[tuple[list[str], list[str], int]]:
    """py-spy's collapsed stacks as (the process frames, the other frames, the samples), the
    simulator's and the idle ones (a wait, a select, the daemon's accept loop) left out."""
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = stack.split(";")
        processes = [f for f in frames if f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("process ")]
        if not frames or any(" simulate " in f for f in processes) or _idle(frames[-1]):
            continue
        yield processes, frames, int(count_text)


def process_shares(collapsed: Path) -> dict[str, tuple[float, float]]:
    """From py-spy's collapsed stacks: per kind of Python process (the driver, the task
    workers, the data source's planning and streaming workers Spark starts per call), its share
    of the busy samples and the share of those spent importing (the simulator left out)."""
    busy: Counter[str] = Counter()
    importing: Counter[str] = Counter()
    for processes, frames, count in _busy_samples(collapsed):
        last = processes[-1] if processes else ""
        if "pyspark.worker" in last:
            kind = "task workers (pyspark.worker)"
        elif "pyspark.sql" in last:
            kind = "planning and streaming workers (pyspark.sql.*, one process per call)"
        else:
            kind = "driver"
        busy[kind] += count
        if any(mark in f for f in frames for mark in _IMPORTS):
            importing[kind] += count
    total = max(sum(busy.values()), 1)
    return {k: (v / total, importing[k] / v) for k, v in busy.most_common()}


def stage_shares(collapsed: Path) -> tuple[dict[str, float], list[tuple[str, float]], int]:
    """From py-spy's collapsed stacks: the share of the busy samples by stage (:data:`STAGES`),
    the top functions by own share, and the samples counted. The simulator's samples and idle
    ones (a wait, a select, the pyspark daemon's accept loop) are left out."""
    stages: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for _, frames, count in _busy_samples(collapsed):
        total += count
        own[_short(frames[-1])] += count
        stage = "other (Python, outside the stages)"
        if any(mark in f for f in frames for mark in _IMPORTS):
            stage = "Python start-up (imports)"
        else:
            for frame in reversed(frames):
                hit = next((s for s, marks in STAGES if any(m in frame for m in marks)), None)
                if hit is not None:
                    stage = hit
                    break
        stages[stage] += count
    shares = {s: c / max(total, 1) for s, c in stages.most_common()}
    top = [(f, c / max(total, 1)) for f, c in own.most_common(25)]
    return shares, top, total


#: Leaf frames of a thread that waits, which py-spy's idle detection may still count:
#: (function, module file's stem).
_IDLE = {
    ("wait", "threading"),
    ("select", "selectors"),
    ("poll", "selectors"),
    ("manager", "daemon"),
}
#: Frames of an import: a worker's start-up (or a module imported late).
_IMPORTS = ("importlib._bootstrap", "zipimport")


#: The per-task work of a task worker, by the first of these frames found in a stack
#: (``--per-task``): what one more task costs, from two profiles of the same rows in more and
#: fewer tasks.
TASK_STAGES = (
    ("Spark's command unpickled (read_command)", ("read_command (",)),
    ("Delta file per task (DeltaStreamWriter.write)", ("DeltaStreamWriter.write",)),
    ("journal (Journal.save)", ("Journal.save", "Journal._write")),
    ("connections (StreamTransport._connect)", ("StreamTransport._connect",)),
    ("client, per request (complete_all, less connections)", ("complete_all",)),
    ("parser (CpuParser.parse, Vectorised.parse)", ("CpuParser.parse", "Vectorised.parse")),
    ("rest of the partition's work (read_partition)", ("read_partition",)),
    ("Arrow hand-off to Spark (serialisers, outside the above)", ("dump_stream", "read_udfs")),
)


def task_stages(collapsed: Path) -> tuple[int, Counter[str]]:
    """The task workers' busy samples, and their split by :data:`TASK_STAGES` (then importing,
    then other)."""
    stages: Counter[str] = Counter()
    total = 0
    for processes, frames, count in _busy_samples(collapsed):
        if not processes or "pyspark.worker" not in processes[-1]:
            continue
        total += count
        for name, marks in TASK_STAGES:
            if any(mark in f for f in frames for mark in marks):
                stages[name] += count
                break
        else:
            importing = any(mark in f for f in frames for mark in _IMPORTS)
            stages["importing (worker start)" if importing else "other"] += count
    return total, stages


def per_task(more: Path, more_tasks: int, fewer: Path, fewer_tasks: int) -> str:
    """A markdown table: each stage's samples in the two profiles (py-spy at 100 Hz) and the
    CPU milliseconds one more task costs."""
    total_a, a = task_stages(more)
    total_b, b = task_stages(fewer)
    per = 10 / (more_tasks - fewer_tasks)  # a sample is 10 ms
    lines = [
        f"| per-task work | samples, {more_tasks} tasks | samples, {fewer_tasks} tasks | "
        "ms of CPU per task |",
        "|---|---:|---:|---:|",
    ]
    names = [name for name, _ in TASK_STAGES] + ["importing (worker start)", "other"]
    lines += [f"| {n} | {a[n]} | {b[n]} | {(a[n] - b[n]) * per:.0f} |" for n in names]
    lines.append(f"| all | {total_a} | {total_b} | {(total_a - total_b) * per:.0f} |")
    return "\n".join(lines)


def _idle(leaf: str) -> bool:
    name, _, where = leaf.partition(" (")
    stem = where.split(":")[0].rsplit("/", 1)[-1].split(".")[0]
    return (name.rsplit(".", 1)[-1], stem) in _IDLE


def _short(frame: str) -> str:
    # py-spy raw frames: "function (path:line)"; keep the function and the path's tail.
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    tail = "/".join(path.split("/")[-2:])
    return f"{name} ({tail})"


#: ``--preload``: pyspark's daemon with dspark-json and what a worker imports imported before
#: it forks (``spark.python.daemon.module``), so that each task worker inherits the modules
#: instead of importing them. Spark 4.3 starts the data source's planning and commit workers
#: (``pyspark.sql.worker.*``) from ``pyspark.daemon`` whatever this setting says: they still
#: import everything, one process per call (seen in the process list of a ``--preload`` run).
PRELOAD_MODULE = "dspark_preload_daemon"
PRELOAD_DAEMON = '''"""pyspark's daemon, with dspark-json imported before it forks workers."""
import importlib

for name in ("dspark_json", "dspark_json.source", "dspark_json.pipeline",
             "dspark_json.parse.cpu", "dspark_json.delta.sink", "pyspark.worker",
             "pyspark.sql.pandas.serializers", "pyspark.sql.worker.plan_data_source_read",
             "pyspark.sql.worker.commit_data_source_write",
             "pyspark.sql.streaming.python_streaming_source_runner"):
    try:
        importlib.import_module(name)
    except ImportError:
        pass

from pyspark.daemon import manager

if __name__ == "__main__":
    manager()
'''


def preload(directory: Path) -> None:
    """Make the next Spark session (its JVM not started yet) fork its Python workers from
    :data:`PRELOAD_DAEMON`: by ``PYSPARK_SUBMIT_ARGS``, which the JVM's launch reads
    (``SparkSession.builder`` is a new builder at each access in PySpark 4)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{PRELOAD_MODULE}.py").write_text(PRELOAD_DAEMON)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(directory), os.environ.get("PYTHONPATH")) if p
    )
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        f"--conf spark.python.daemon.module={PRELOAD_MODULE} pyspark-shell"
    )


def compiled_spark_home(directory: Path) -> Path:
    """A Spark home like the installed pyspark's (links to its ``bin``, ``jars``...) whose
    ``python/lib/pyspark.zip`` also holds each module's bytecode (:func:`add_bytecode`). Spark
    puts that zip first on every Python worker's path, and zipimport compiles every module it
    imports from source, in every worker that starts: ``_compile_source (<frozen zipimport>)``
    in the profile. The deployment fix ``docs/guide/performance.md`` gives, measured
    (``--compiled-pyspark``)."""
    import pyspark

    home = Path(pyspark.__file__).parent
    for entry in home.iterdir():
        if entry.name != "python":
            (directory / entry.name).symlink_to(entry)
    (directory / "python").mkdir()
    for entry in (home / "python").iterdir():
        if entry.name != "lib":
            (directory / "python" / entry.name).symlink_to(entry)
    lib = directory / "python" / "lib"
    lib.mkdir()
    for entry in (home / "python" / "lib").iterdir():
        if entry.name != "pyspark.zip":
            (lib / entry.name).symlink_to(entry)
    shutil.copyfile(home / "python" / "lib" / "pyspark.zip", lib / "pyspark.zip")
    add_bytecode(lib / "pyspark.zip")
    return directory


def add_bytecode(archive: Path) -> None:
    """Add each module's bytecode to the zip ``archive`` beside its source, as zipimport reads
    it: each module's ``.pyc`` next to its ``.py`` (``legacy``), unchecked hash-based
    (zipimport does not compare it with the source's time, which unpacking changes). The
    snippet of ``docs/guide/performance.md``, "pyspark.zip"."""
    import compileall
    import py_compile
    import zipfile

    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
        compileall.compile_dir(
            tmp,
            quiet=2,
            legacy=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(Path(tmp).rglob("*.pyc")):
                z.write(path, path.relative_to(tmp).as_posix())


def compile_tree() -> None:
    """Bytecode for dspark_json's modules, as an installed package has (pip compiles at
    install), where this checkout has none (``PYTHONDONTWRITEBYTECODE``): else every Python
    worker compiles them from source, which no installed deployment does."""
    import compileall

    import dspark_json

    compileall.compile_dir(Path(dspark_json.__file__).parent, quiet=2)
    warm_kernel_cache()


def warm_kernel_cache() -> None:
    """The parser's kernels in numba's cache before any measured run, as on a node that has
    run a task before: in a fresh checkout the first Python workers compile them in the
    background (about 50 CPU-seconds here), which a warm-up of a few thousand prompts does not
    wait for (the runs of 2026-12-05 02:13 that this left out: the first rounds of each process
    3-7x the CPU of the next)."""
    from dspark_json.parse import warmup
    from dspark_json.parse.cpu import warm_kernels

    warmup.wait(warm_kernels)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import dspark_json
    from dspark_json.dev.local import SimulatorProcess, local_spark

    if args.preload:
        preload(Path(tempfile.mkdtemp(prefix="dspark-preload-")))
    if args.compiled_pyspark:
        home = compiled_spark_home(Path(tempfile.mkdtemp(prefix="dspark-spark-home-")))
        os.environ["SPARK_HOME"] = str(home)
    if not args.as_is:
        compile_tree()
    schema = (Path(dspark_json.__file__).parent / "examples" / "review_schema.json").read_text()
    spark = local_spark("dspark-json end-to-end CPU", cores=args.cores)
    dspark_json.register(spark)
    figures: list[dict[str, Any]] = []
    profiles: dict[str, Any] = {}
    settings = {"both": [True, False], "off-on": [False, True]}.get(
        args.journal, [args.journal == "on"]
    )
    try:
        with tempfile.TemporaryDirectory() as tmp, SimulatorProcess(latency=args.latency) as server:
            work = Path(tmp)
            assert server._process is not None
            exclude = {server._process.pid}
            write_prompts(work / "prompts", args.prompts)
            write_prompts(work / "warm", args.warm_prompts)
            runs = 0
            for journal in settings:  # warm-up
                runs += 1
                run_once(spark, server.url, work / "warm", work / f"run-{runs}", schema,
                         journal=journal, concurrency=args.concurrency,
                         partition_size=args.partition_size)  # fmt: skip
            for round_ in range(args.repeat):
                for journal in settings:
                    runs += 1
                    run = work / f"run-{runs}"
                    with TreeCpu(exclude, poll=not args.no_poll) as cpu:
                        seconds = run_once(
                            spark, server.url, work / "prompts", run, schema,
                            journal=journal, concurrency=args.concurrency,
                            partition_size=args.partition_size,
                        )  # fmt: skip
                    kinds = cpu.by_kind()
                    total = sum(kinds.values())
                    rows = table_rows(run / "table")
                    assert rows == args.prompts, (rows, args.prompts)
                    figures.append(
                        {
                            "journal": journal,
                            "round": round_,
                            "prompts": args.prompts,
                            "rows": rows,
                            "wall_s": seconds,
                            "cpu_s": total,
                            "cpu_s_by_process": kinds,
                            "rows_per_cpu_s": rows / total,
                        }
                    )
                    print(
                        f"journal {'on ' if journal else 'off'} round {round_}: {rows:,} rows, "
                        f"{seconds:.1f}s wall, {total:.1f} CPU-s ({rows / total:,.0f} rows per "
                        f"CPU-second) { ({k: round(v, 1) for k, v in kinds.items()}) }",
                        flush=True,
                    )
    finally:
        spark.stop()
    return {"figures": figures, "profiles": profiles}


def summarise(figures: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    best: dict[str, dict[str, Any]] = {}
    for f in figures:
        key = "on" if f["journal"] else "off"
        if key not in best or f["rows_per_cpu_s"] > best[key]["rows_per_cpu_s"]:
            best[key] = f
    return best


def markdown(meta: dict[str, Any], result: dict[str, Any]) -> str:
    best = summarise(result["figures"])
    lines = [
        f"End to end CPU cost, {meta['date']}, {meta['cpu_cores']} cores, Spark "
        f"local[{meta['spark_cores']}], {meta['prompts']:,} prompts, a loaded machine (other "
        f"jobs ran alongside: CPU seconds, not wall time, are the figure; load average at "
        f"the end {meta['load_average_at_end']}). Command: `{meta['command']}` "
        f"(dspark_json from `{meta['tree']}`)",
        "",
        "Prompts -> the source -> the simulator (answering at once) -> Arrow -> journal -> "
        "Delta (write_delta, availableNow). CPU seconds of this process tree (the driver's "
        "Python, Spark's JVM, the Python workers), the simulator's excluded; best of "
        f"{meta['repeat']} rounds, journal on and off alternating.",
        "",
        "| journal | rows | wall s | CPU s | rows per CPU-second | JVM CPU s | Python workers "
        "CPU s | driver CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in ("on", "off"):
        if key not in best:
            continue
        f = best[key]
        k = f["cpu_s_by_process"]
        lines.append(
            f"| {key} | {f['rows']:,} | {f['wall_s']:.1f} | {f['cpu_s']:.1f} | "
            f"{f['rows_per_cpu_s']:,.0f} | {k.get('Spark JVM', 0):.1f} | "
            f"{k.get('Python workers', 0):.1f} | {k.get('driver (Python)', 0):.1f} |"
        )
    for key, profile in result["profiles"].items():
        lines += [
            "",
            f"### Python side, journal {key}: shares of py-spy's busy samples "
            f"({profile['samples']:,}), driver and workers",
            "",
            "| stage | share |",
            "|---|---:|",
        ]
        lines += [f"| {s} | {v:.1%} |" for s, v in profile["stages"].items()]
        lines += ["", "| Python process | share of busy samples | of which importing |"]
        lines += ["|---|---:|---:|"]
        lines += [
            f"| {k} | {share:.1%} | {imports:.1%} |"
            for k, (share, imports) in profile.get("processes", {}).items()
        ]
        lines += ["", "| function (own time) | share |", "|---|---:|"]
        lines += [f"| `{f}` | {v:.1%} |" for f, v in profile["top"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--warm-prompts",
        type=int,
        default=4_000,
        help="prompts of the warm-up run of each setting: enough for the JVM's JIT (with 200, "
        "the first measured run carried it: its JVM CPU twice the second's, either setting)",
    )
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--concurrency", type=int, default=64, help="option maxConcurrency")
    parser.add_argument(
        "--partition-size",
        type=int,
        help="option partitionSize (default: left to the planner, docs/guide/performance.md)",
    )
    parser.add_argument(
        "--latency", type=float, default=0.0, help="the simulator's seconds per completion"
    )
    parser.add_argument("--profile", type=Path, help="py-spy's collapsed stacks go here")
    parser.add_argument(
        "--journal",
        choices=("on", "off", "both", "off-on"),
        default="both",
        help="both: on, then off, in each round; off-on: the other order",
    )
    parser.add_argument("--no-poll", action="store_true", help="(under py-spy) no CPU polling")
    parser.add_argument(
        "--preload", action="store_true", help="workers forked from a daemon that imported us"
    )
    parser.add_argument(
        "--compiled-pyspark",
        action="store_true",
        help="workers import pyspark from a pyspark.zip that holds bytecode (a Spark home "
        "linked to the installed one, its zip rebuilt)",
    )
    parser.add_argument(
        "--as-is",
        action="store_true",
        help="leave dspark_json without bytecode where it has none (default: compile it, as "
        "pip does at install)",
    )
    parser.add_argument(
        "--per-task",
        nargs=4,
        metavar=("MORE", "TASKS", "FEWER", "TASKS"),
        help="print what a task costs, by stage, from two --profile outputs (journal-on.txt) of "
        "the same rows in more and fewer tasks, and exit",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.per_task:
        more, more_tasks, fewer, fewer_tasks = args.per_task
        print(per_task(Path(more), int(more_tasks), Path(fewer), int(fewer_tasks)))
        return 0
    if args.smoke:
        args.prompts, args.repeat, args.warm_prompts = 200, 1, 200
    result = measure(args)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        for journal in ("on", "off") if args.journal in ("both", "off-on") else (args.journal,):
            out = args.profile / f"journal-{journal}.txt"
            profiled(args, journal, out)
            shares, top, samples = stage_shares(out)
            result["profiles"][journal] = {
                "samples": samples,
                "stages": shares,
                "top": top,
                "processes": process_shares(out),
            }
    meta = {
        **machine(),
        "spark_cores": args.cores,
        "prompts": args.prompts,
        "repeat": args.repeat,
        "latency_s": args.latency,
        "partition_size": args.partition_size,
        "command": "python benchmarks/end_to_end_cpu.py " + " ".join(argv or sys.argv[1:]),
        "tree": TREE,
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
    }
    text = markdown(meta, result)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "end_to_end_cpu.json").write_text(
        json.dumps({"machine": meta, **result}, indent=2) + "\n"
    )
    (args.out / "end_to_end_cpu.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
