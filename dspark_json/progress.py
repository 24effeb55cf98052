"""Live progress of a run, inside a micro-batch and across the run: what each running task has
done, every few seconds, and what the driver knows of the totals.

Where option ``metrics`` names a directory, each task writes a small record of its own to
``<metrics>/_progress/`` (Spark's readers skip names starting with ``_``: the metrics directory
still reads as a table) every :data:`INTERVAL` seconds from a timer thread, and once at its end,
through :func:`dspark_json.fs.write_atomic` with the query's storage settings (object stores
too). Nothing is added per row: the thread reads the counts the client keeps anyway
(:class:`dspark_json.records.Watch`). A running task's figures are what its requests have seen
so far (``ok``: answers received, parsed later); a finished task's are its metrics record's
(:func:`dspark_json.metrics.partition_metrics`: rows by ``_status``), so each field has one
definition for a finished partition, the metrics record's.

The driver writes what it knows at planning: the prompts of each micro-batch
(``batch-NNNNNN.json``) and the run (``run.json``: when it started, its first batch and, for
``availableNow``, the prompts of the whole run). :func:`snapshot` reads them all back into one
object (:data:`VERSION`; the shape is documented in docs/guide/watching-a-run.md), which
``dspark-json metrics DIR --json`` prints, :func:`render` draws as a bar, and
:func:`show_progress` refreshes in a terminal or a notebook.

A long run stays bounded: at planning, the driver folds the records of the run's batches older
than :data:`KEEP_BATCHES` into one (``rollup.json``: the figures summed, a coarse series for the
report's plots) and deletes them (:func:`compact`), so the directory, and what each
snapshot reads, holds a few batches whatever the run's length.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

import pyarrow as pa

from dspark_json.cost import Pricing, cost_usd
from dspark_json.fs import FileEntry, list_files, read_text, remove, write_atomic
from dspark_json.records import Watch, watching
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings, parse_settings

__all__ = [
    "INTERVAL",
    "KEEP_BATCHES",
    "PROGRESS_DIR",
    "VERSION",
    "compact",
    "eta_seconds",
    "finished",
    "render",
    "show_progress",
    "snapshot",
    "task_progress",
    "task_records",
    "well_formed",
    "write_batch",
    "write_run",
]

logger = logging.getLogger("dspark_json")

#: The version of the records and of :func:`snapshot`'s shape (a new field keeps it; a field
#: renamed or removed raises it).
VERSION = 1
#: Seconds between a running task's records.
INTERVAL = 2.0
#: The progress directory, under the metrics directory.
PROGRESS_DIR = "_progress"
#: An environment variable: ``1`` turns the tasks' progress records off (the benchmark of
#: their cost compares the same stream with and without them).
OFF = "DSPARK_JSON_NO_PROGRESS"
#: The samples a task keeps for the report's plots (every other one dropped when full).
SAMPLES = 64
#: The micro-batches of a run whose records stay as written; older ones are folded into
#: :data:`ROLLUP` at planning (:func:`compact`).
KEEP_BATCHES = 8
#: The record that holds the run's older batches, summed.
ROLLUP = "rollup.json"
#: The points of the rollup's series (every other one dropped when full).
ROLLUP_SAMPLES = 256
#: The bytes of a progress record read at most (ours: a few KB; a file past it is not ours).
RECORD_LIMIT = 16 << 20


def progress_dir(metrics: str) -> str:
    return metrics.rstrip("/") + "/" + PROGRESS_DIR


def _task_name(batch: int | None, partition: int) -> str:
    where = f"batch-{batch:06d}" if batch is not None else "read"
    return f"{where}-part-{partition:05d}.json"


def _put(metrics: str, name: str, record: Mapping[str, Any], storage: StorageSettings) -> None:
    try:
        write_atomic(
            progress_dir(metrics), name, json.dumps(record).encode("utf-8"), storage=storage
        )
    except (OSError, pa.ArrowException) as exc:  # progress is never a failed task
        logger.debug("progress: %s not written to %s (%s)", name, metrics, exc)


class _Task:
    """One task's progress: the timer thread and what it writes."""

    def __init__(
        self,
        metrics: str,
        storage: StorageSettings,
        *,
        batch: int | None,
        partition: int,
        prompts: int,
        model: str | None,
        pricing: Pricing | None,
    ) -> None:
        self.metrics, self.storage = metrics, storage
        self.batch, self.partition, self.prompts = batch, partition, prompts
        self.model, self.pricing = model, pricing
        self.watch = Watch()
        self.started = time.time()
        self.samples: list[list[float]] = []
        self.final: dict[str, Any] | None = None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name="dspark-json-progress", daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(INTERVAL):
            with self.lock:  # the last record is the task's end, never a late running one
                if self.stop.is_set():
                    return
                try:
                    self.write()
                except RuntimeError:  # a count changed size while read: the next tick has it
                    continue

    def write(self) -> None:
        record = self.record()
        _put(self.metrics, _task_name(self.batch, self.partition), record, self.storage)

    def record(self) -> dict[str, Any]:
        """The task's record now: the metrics record's figures once it ended, else the
        client's counts so far."""
        now = time.time()
        figures = _from_metrics(self.final, self.model) if self.final is not None else self._live()
        sample = [
            round(now - self.started, 2),
            figures["done"],
            figures["requests"],
            figures["held_seconds"],
            figures["inflight"],
        ]
        self.samples.append(sample)
        if len(self.samples) > SAMPLES:
            self.samples = self.samples[:1] + self.samples[2::2]
        return {
            "version": VERSION,
            "kind": "task",
            "batch": self.batch,
            "partition": self.partition,
            "state": "done" if self.final is not None else "running",
            "started": round(self.started, 3),
            "updated": round(now, 3),
            "prompts": self.prompts,
            **figures,
            "cost_usd": _cost(figures, self.model, self.pricing),
            "samples": self.samples,
        }

    def _live(self) -> dict[str, Any]:
        """The client's counts so far (every run of the task: the first send, the re-asks)."""
        statuses: Counter[str] = Counter()
        failures: Counter[str] = Counter()
        tokens = [0, 0, 0]
        models: dict[str, dict[str, Any]] = {}
        done = requests = retries = 0
        held, inflight = 0.0, 0
        for run in list(self.watch.runs):
            tally = run.stats
            done += tally.done
            requests += tally.requests
            retries += tally.retries
            statuses.update(dict(tally.statuses))
            failures.update(dict(tally.failures))
            for i in range(3):
                tokens[i] += tally.tokens[i]
            pool = run.pool  # held at the gate and by the token budgets; the in-flight limits
            held += pool.held_s
            inflight = max([inflight, *(int(x.limit) for x in pool.all_limits())])
            for model, sent in dict(tally.model_requests).items():
                used = tally.model_tokens.get(model, [0, 0, 0])
                figures = models.setdefault(model, _model_figures())
                figures["requests"] += sent
                for i, kind in enumerate(_KINDS):
                    figures["tokens"][kind] += used[i]
        done = min(done, self.prompts)
        return {
            "done": done,
            "ok": max(done - sum(failures.values()), 0),
            "errors": dict(failures),
            "requests": requests,
            "retries": retries,
            "http_status": dict(statuses),
            "tokens": dict(zip(_KINDS, tokens, strict=True)),
            "held_seconds": round(held, 3),
            "inflight": inflight,
            "latency_ms": None,
            "models": models,
        }


_KINDS = ("input", "output", "cached")


def _model_figures() -> dict[str, Any]:
    return {"done": 0, "requests": 0, "tokens": dict.fromkeys(_KINDS, 0), "cost_usd": None}


def _add_models(into: dict[str, dict[str, Any]], models: Mapping[str, Mapping[str, Any]]) -> None:
    """Add a record's figures by model to ``into`` (a snapshot's, or the rollup's)."""
    for model, figures in models.items():
        total = into.setdefault(model, _model_figures())
        total["done"] += figures.get("done") or 0
        total["requests"] += figures.get("requests") or 0
        for kind in _KINDS:
            total["tokens"][kind] += (figures.get("tokens") or {}).get(kind) or 0
        if figures.get("cost_usd") is not None:
            total["cost_usd"] = round((total["cost_usd"] or 0.0) + figures["cost_usd"], 6)


def _from_metrics(record: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    """A finished partition's figures, from its metrics record (``model``: the query's, where
    the record has no figures by model: one model in play)."""
    rows = dict(record.get("rows") or {})
    ok = rows.pop("ok", 0)
    models = {}
    for name, figures in (record.get("models") or {}).items():
        models[name] = {
            "done": figures.get("rows") or 0,
            "requests": figures.get("requests") or 0,
            "tokens": {
                "input": figures.get("prompt_tokens") or 0,
                "output": figures.get("completion_tokens") or 0,
                "cached": 0,
            },
            "cost_usd": None,
        }
    if not models and model is not None and record.get("requests"):
        models[model] = {
            "done": record.get("prompts") or 0,
            "requests": record.get("requests") or 0,
            "tokens": {
                "input": record.get("prompt_tokens") or 0,
                "output": record.get("completion_tokens") or 0,
                "cached": record.get("cached_tokens") or 0,
            },
            "cost_usd": None,
        }
    limit = record.get("inflight_limit") or {}
    return {
        "done": record.get("prompts") or 0,
        "ok": ok,
        "errors": rows,
        "requests": record.get("requests") or 0,
        "retries": record.get("retries") or 0,
        "http_status": dict(record.get("http_status") or {}),
        "tokens": {
            "input": record.get("prompt_tokens") or 0,
            "output": record.get("completion_tokens") or 0,
            "cached": record.get("cached_tokens") or 0,
        },
        "held_seconds": record.get("held_seconds") or 0.0,
        "inflight": limit.get("final") or 0,
        "latency_ms": record.get("latency_ms"),
        "models": models,
    }


def _cost(figures: Mapping[str, Any], model: str | None, pricing: Pricing | None) -> float | None:
    """The figures' cost in USD (option ``pricing``), by model where there are several."""
    if pricing is None:
        return None
    models = figures.get("models") or {}
    if len(models) > 1:
        total = 0.0
        for name, each in models.items():
            tokens = each["tokens"]
            each["cost_usd"] = cost_usd(
                pricing, name, tokens["input"], tokens["output"], tokens["cached"]
            )
            total += each["cost_usd"] or 0.0
        return round(total, 6)
    tokens = figures["tokens"]
    name = next(iter(models), model)
    return cost_usd(pricing, name, tokens["input"], tokens["output"], tokens["cached"])


_CURRENT = threading.local()


@contextlib.contextmanager
def task_progress(
    metrics: str | None,
    *,
    storage: StorageSettings,
    batch: int | None,
    partition: int,
    prompts: int,
    model: str | None,
    pricing: Pricing | None,
) -> Iterator[None]:
    """Write the running task's progress every :data:`INTERVAL` seconds, and at its end (with
    the metrics record :func:`finished` hands over); nothing where ``metrics`` is ``None``."""
    if metrics is None or os.environ.get(OFF) == "1":
        yield
        return
    task = _Task(
        metrics,
        storage,
        batch=batch,
        partition=partition,
        prompts=prompts,
        model=model,
        pricing=pricing,
    )
    watching(task.watch)
    _CURRENT.task = task
    task.thread.start()
    try:
        yield
    finally:
        task.stop.set()
        watching(None)
        _CURRENT.task = None
        with task.lock:
            task.write()


def finished(record: Mapping[str, Any]) -> None:
    """The calling task's metrics record (:func:`dspark_json.metrics.report`): its progress
    takes its figures from it."""
    task: _Task | None = getattr(_CURRENT, "task", None)
    if task is not None:
        task.final = dict(record)


def write_batch(
    metrics: str, *, storage: StorageSettings, batch: int, prompts: int, partitions: int
) -> None:
    """The driver, at planning: the prompts of micro-batch ``batch``."""
    record = {
        "version": VERSION,
        "kind": "batch",
        "batch": batch,
        "prompts": prompts,
        "partitions": partitions,
        "planned": round(time.time(), 3),
    }
    _put(metrics, f"batch-{batch:06d}.json", record, storage)


def write_run(
    metrics: str,
    *,
    storage: StorageSettings,
    first_batch: int,
    started: float,
    prompts: int | None,
    trigger: str,
    ended: float | None = None,
) -> None:
    """The driver: the run (this reader's), its first micro-batch and, for ``availableNow``,
    its prompts in all."""
    record = {
        "version": VERSION,
        "kind": "run",
        "first_batch": first_batch,
        "started": round(started, 3),
        "trigger": trigger,
        "prompts": prompts,
        "ended": None if ended is None else round(ended, 3),
    }
    _put(metrics, "run.json", record, storage)


def _read(uri: str, storage: StorageSettings) -> dict[str, Any] | None:
    try:
        found = json.loads(read_text(uri, storage=storage, limit=RECORD_LIMIT))
    except (OSError, ValueError, pa.ArrowException):
        return None
    return found if isinstance(found, dict) else None


def _batch_of(name: str) -> int | None:
    if not name.startswith("batch-"):
        return None
    try:
        return int(name[6:12])
    except ValueError:
        return None


def snapshot(
    metrics: str, *, storage: StorageSettings = ENVIRONMENT_ONLY, now: float | None = None
) -> dict[str, Any]:
    """The run so far, from the progress records under ``metrics``: the shape ``dspark-json
    metrics DIR --json`` prints (docs/guide/watching-a-run.md)."""
    now = time.time() if now is None else now
    run, batches, tasks = _records(metrics, storage)
    return summarize(run, batches, tasks, now=now)


def task_records(
    metrics: str, *, storage: StorageSettings = ENVIRONMENT_ONLY
) -> list[dict[str, Any]]:
    """The run's task records under ``metrics`` (its older batches' as one rollup record,
    ``kind`` ``rollup``), for the report's plots."""
    return _records(metrics, storage)[2]


def _records(
    metrics: str, storage: StorageSettings
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """The run record, its batch records and its task records (the rollup among them). Read
    again where the driver folded batches meanwhile (the rollup's ``through_batch`` moved), so
    that a snapshot never misses the batches being folded: the Prometheus counters made from
    it never go down."""
    for _ in range(3):
        before = _rollup(metrics, storage)
        entries = list_files(progress_dir(metrics), suffixes=(".json",), storage=storage)
        found = _read_entries(entries, storage)
        rollup = _rollup(metrics, storage)
        if _through(before) == _through(rollup):
            break
    run, batches, tasks = found
    first = (run or {}).get("first_batch")
    if rollup is not None and rollup.get("first_batch") == first and first is not None:
        through = _through(rollup)
        batches = [b for b in batches if b["batch"] > through]
        tasks = [t for t in tasks if _batch_number(t) > through]
        tasks.append(rollup)
    return run, batches, tasks


def _batch_number(record: Mapping[str, Any]) -> int:
    batch = record.get("batch")
    return -1 if batch is None else int(batch)  # a batch read's task: before any stream's


def _through(rollup: Mapping[str, Any] | None) -> int:
    return int(rollup["through_batch"]) if rollup is not None else -(2**62)


def _rollup(metrics: str, storage: StorageSettings) -> dict[str, Any] | None:
    found = _read(progress_dir(metrics) + "/" + ROLLUP, storage)
    if (
        found is None
        or found.get("kind") != "rollup"
        or not well_formed(found)
        or not isinstance(found.get("through_batch"), int)
        or not isinstance(found.get("first_batch"), int)
    ):
        return None
    return found


def _read_entries(
    entries: Sequence[FileEntry], storage: StorageSettings
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
    run = next((_read(e.path, storage) for e in entries if e.name == "run.json"), None)
    if run is not None and not well_formed(run):
        run = None
    first = (run or {}).get("first_batch")
    tasks, batches = [], {}
    for entry in entries:
        batch = _batch_of(entry.name)
        if entry.name.startswith("read-") and first is None:
            batch = -1
        if batch is None or (first is not None and batch < first):
            continue
        record = _read(entry.path, storage)
        if record is None:
            continue
        if not well_formed(record):
            logger.debug("Progress record %s is not one of ours: skipped", entry.path)
        elif record.get("kind") == "batch":
            batches[record["batch"]] = record
        elif record.get("kind") == "task":
            tasks.append(record)
    return run, list(batches.values()), tasks


def compact(metrics: str, *, storage: StorageSettings, batch: int, first_batch: int) -> None:
    """The driver, at planning of micro-batch ``batch`` (every batch before it has ended): the
    records of the run's batches older than :data:`KEEP_BATCHES` are folded into
    :data:`ROLLUP` and deleted, and those of earlier runs (before ``first_batch``) deleted.
    The rollup is written first: a crash in between leaves files it covers, which snapshots
    skip and the next call deletes."""
    through = batch - KEEP_BATCHES
    if through < first_batch:
        return
    try:
        entries = list_files(progress_dir(metrics), suffixes=(".json",), storage=storage)
        rollup = _rollup(metrics, storage)
        if rollup is None or rollup["first_batch"] != first_batch:
            rollup = _new_rollup(first_batch)
        done = _through(rollup)
        gone, folded = [], False
        for entry in entries:
            number = _batch_of(entry.name)
            if number is None and entry.name.startswith("read-"):
                number = -1  # a batch read's: never this run's
            if number is None or number > through:
                continue
            gone.append(entry)
            if number < first_batch or number <= done:
                continue
            record = _read(entry.path, storage)
            if record is not None and well_formed(record):
                _fold(rollup, record)
                folded = True
        if not gone:
            return
        if folded or rollup["through_batch"] < through:
            rollup["through_batch"] = through
            _put(metrics, ROLLUP, rollup, storage)
        for entry in gone:
            remove(entry.path, storage=storage)
    except (OSError, pa.ArrowException) as exc:  # progress never fails a batch
        logger.debug("progress: %s not compacted (%s)", metrics, exc)


def _new_rollup(first_batch: int) -> dict[str, Any]:
    return {
        "version": VERSION,
        "kind": "rollup",
        "state": "done",
        "first_batch": first_batch,
        "through_batch": first_batch - 1,
        "batches": 0,
        "tasks": 0,
        "planned": 0,
        "started": None,
        "updated": None,
        "prompts": 0,
        "done": 0,
        "ok": 0,
        "errors": {},
        "requests": 0,
        "retries": 0,
        "http_status": {},
        "tokens": dict.fromkeys(_KINDS, 0),
        "held_seconds": 0.0,
        "inflight": 0,
        "cost_usd": None,
        "models": {},
        "samples": [],
    }


def _fold(rollup: dict[str, Any], record: Mapping[str, Any]) -> None:
    """Add a batch's or a task's record to the rollup."""
    if record.get("kind") == "batch":
        rollup["batches"] += 1
        rollup["planned"] += record.get("prompts") or 0
        return
    if record.get("kind") != "task":
        return
    rollup["tasks"] += 1
    for field in ("prompts", "done", "ok", "requests", "retries"):
        rollup[field] += record.get(field) or 0
    rollup["held_seconds"] = round(rollup["held_seconds"] + (record.get("held_seconds") or 0), 3)
    for field in ("errors", "http_status", "tokens"):
        counts = Counter(rollup[field])
        counts.update(record.get(field) or {})
        rollup[field] = dict(counts)
    if record.get("cost_usd") is not None:
        rollup["cost_usd"] = round((rollup["cost_usd"] or 0.0) + record["cost_usd"], 6)
    _add_models(rollup["models"], record.get("models") or {})
    started, updated = record.get("started"), record.get("updated")
    if started is not None:
        if rollup["started"] is not None and started < rollup["started"]:
            shift = rollup["started"] - started  # the series counts from the earliest start
            rollup["samples"] = [[s[0] + shift, *s[1:]] for s in rollup["samples"]]
        earliest = rollup["started"]
        rollup["started"] = started if earliest is None else min(earliest, started)
    if updated is not None:
        rollup["updated"] = max(rollup["updated"] or updated, updated)
    if rollup["started"] is not None and updated is not None:
        # The series of the report's plots: the folded tasks' totals at each one's end.
        point = [round(updated - rollup["started"], 2), rollup["done"], rollup["requests"]]
        rollup["samples"].append([*point, rollup["held_seconds"], 0])
        rollup["samples"].sort(key=lambda sample: sample[0])
        if len(rollup["samples"]) > ROLLUP_SAMPLES:
            rollup["samples"] = rollup["samples"][:1] + rollup["samples"][2::2]


#: The fields of the records that hold a number (or ``null``), and those that hold an object
#: of numbers.
_NUMBERS = frozenset(
    {
        "batch",
        "partition",
        "started",
        "updated",
        "ended",
        "first_batch",
        "prompts",
        "partitions",
        "done",
        "ok",
        "requests",
        "retries",
        "held_seconds",
        "inflight",
        "cost_usd",
        "tasks",
        "batches",
        "planned",
        "through_batch",
    }
)
_COUNTS = frozenset({"errors", "http_status", "tokens", "latency_ms"})


def _number(value: Any) -> bool:
    if value is None:
        return True
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _counts(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and all(_number(v) for v in value.values()))


def well_formed(record: Mapping[str, Any]) -> bool:
    """Whether a record read back has the types :func:`summarize` adds up: a file truncated,
    edited by hand or written by something else (a string, ``NaN``, a list where a number
    goes) is skipped, not a crash of ``metrics``, ``report``, a scrape or ``show_progress``."""
    if not all(_number(record.get(field)) for field in _NUMBERS):
        return False
    if record.get("kind") == "batch" and record.get("batch") is None:
        return False
    if not all(_counts(record.get(field)) for field in _COUNTS):
        return False
    models = record.get("models")
    if models is not None and not (
        isinstance(models, dict)
        and all(
            isinstance(figures, dict)
            and _number(figures.get("done"))
            and _number(figures.get("requests"))
            and _number(figures.get("cost_usd"))
            and _counts(figures.get("tokens"))
            for figures in models.values()
        )
    ):
        return False
    samples = record.get("samples")
    return samples is None or (
        isinstance(samples, list)
        and all(
            isinstance(sample, list)
            and len(sample) >= 5
            and all(x is not None and _number(x) for x in sample)
            for sample in samples
        )
        and (not samples or record.get("started") is not None)
    )


def summarize(
    run: Mapping[str, Any] | None,
    batches: Sequence[Mapping[str, Any]],
    tasks: Sequence[Mapping[str, Any]],
    *,
    now: float,
) -> dict[str, Any]:
    """The snapshot of a run from its records (see :func:`snapshot`)."""
    done = sum(t.get("done") or 0 for t in tasks)
    rollups = [t for t in tasks if t.get("kind") == "rollup"]  # the older batches, summed
    planned = sum(b.get("prompts") or 0 for b in batches) + sum(r["planned"] for r in rollups)
    total = (run or {}).get("prompts")
    if total is None:
        total = planned or (sum(t.get("prompts") or 0 for t in tasks) or None)
    errors: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    models: dict[str, dict[str, Any]] = {}
    costs = [t.get("cost_usd") for t in tasks]
    for task in tasks:
        errors.update(task.get("errors") or {})
        statuses.update(task.get("http_status") or {})
        tokens.update(task.get("tokens") or {})
        _add_models(models, task.get("models") or {})
    started_at = [t["started"] for t in tasks if t.get("started")]
    run_started = (run or {}).get("started")
    began = min(started_at) if started_at else run_started
    ended = (run or {}).get("ended")
    running = sum(1 for t in tasks if t.get("state") == "running")
    ended_tasks = sum(t["tasks"] if t.get("kind") == "rollup" else 1 for t in tasks) - running
    finished_all = bool(tasks) and running == 0
    complete = ended is not None or (
        total is not None and done >= total and finished_all and (run or {}).get("prompts")
    )
    last = max((t.get("updated") or 0 for t in tasks), default=now)
    clock = last if complete else now
    elapsed = max(clock - began, 0.0) if began is not None else 0.0
    rate = done / elapsed if elapsed > 0 else None
    return {
        "version": VERSION,
        "state": "finished" if complete else ("running" if tasks or run else "waiting"),
        "trigger": (run or {}).get("trigger"),
        "first_batch": (run or {}).get("first_batch"),
        "batches": len(
            {t.get("batch") for t in tasks if t.get("kind") != "rollup"}
            | {b.get("batch") for b in batches}
        )
        + sum(r["batches"] for r in rollups),
        "tasks": {"running": running, "done": ended_tasks},
        "prompts": {"done": done, "total": total},
        "ok": sum(t.get("ok") or 0 for t in tasks),
        "errors": dict(errors),
        "requests": sum(t.get("requests") or 0 for t in tasks),
        "retries": sum(t.get("retries") or 0 for t in tasks),
        "http_status": dict(statuses),
        "tokens": {kind: tokens.get(kind, 0) for kind in _KINDS},
        "held_seconds": round(sum(t.get("held_seconds") or 0.0 for t in tasks), 3),
        "cost_usd": None
        if all(c is None for c in costs) or not costs
        else round(sum(c or 0.0 for c in costs), 6),
        "models": models,
        "elapsed_seconds": round(elapsed, 1),
        "rows_per_second": None if rate is None else round(rate, 2),
        "eta_seconds": None if complete else eta_seconds(done, total, rate),
    }


def eta_seconds(done: int, total: int | None, rate: float | None) -> float | None:
    """Seconds left at ``rate`` prompts a second for ``total - done`` prompts; ``None`` where
    the total or the rate is not known yet (no prompt done)."""
    if total is None or not rate or done <= 0:
        return None
    return round(max(total - done, 0) / rate, 1)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _printable(text: str) -> str:
    """``text`` without control characters: a model's name comes from the server's
    ``/v1/models``, and an escape sequence in it would move the cursor or retitle the terminal
    that ``metrics --follow`` draws in."""
    return "".join("?" if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 else c for c in text)


def render(shot: Mapping[str, Any], *, width: int = 30) -> str:
    """The snapshot as text: a bar line and the figures (``dspark-json metrics DIR``)."""
    prompts = shot["prompts"]
    done, total = prompts["done"], prompts["total"]
    share = min(done / total, 1.0) if total else 0.0
    filled = int(share * width)
    bar = "#" * filled + "-" * (width - filled)
    of = f"{done}/{total}" if total is not None else f"{done}/?"
    rate = shot["rows_per_second"]
    head = (
        f"[{bar}] {share * 100:5.1f}% {of} prompts, "
        f"{rate if rate is not None else '?'} rows/s, elapsed {_duration(shot['elapsed_seconds'])}"
        + (
            f", ETA {_duration(shot['eta_seconds'])}"
            if shot["state"] != "finished"
            else ", finished"
        )
    )
    errors = ", ".join(f"{_printable(k)} {v}" for k, v in sorted(shot["errors"].items())) or "none"
    tokens = shot["tokens"]
    cost = shot.get("cost_usd")
    lines = [
        head,
        f"ok {shot['ok']}, errors: {errors}; {shot['requests']} requests, "
        f"{shot['retries']} retries; tokens {tokens['input']} in ({tokens['cached']} cached), "
        f"{tokens['output']} out; held by the pool {shot['held_seconds']:.1f}s"
        + (f"; cost ${cost:.4f}" if cost is not None else ""),
    ]
    for model, figures in sorted(shot["models"].items()):
        each = figures["tokens"]
        lines.append(
            f"  {_printable(model)}: {figures['requests']} requests, tokens {each['input']} in / "
            f"{each['output']} out"
            + (f", ${figures['cost_usd']:.4f}" if figures.get("cost_usd") is not None else "")
        )
    return "\n".join(lines)


def show_progress(
    query: Any,
    metrics: str,
    *,
    storage_options: str | None = None,
    interval: float = INTERVAL,
    out: TextIO | None = None,
) -> dict[str, Any]:
    """Show the progress of a running ``StreamingQuery`` until it ends, as one bar refreshed
    every ``interval`` seconds: in a notebook through IPython's display (where a notebook
    kernel runs this), in a terminal on ``out`` (default stderr). Returns the last snapshot.

    Parameters
    ----------
    query:
        The running query (``isActive`` is read).
    metrics:
        Its option ``metrics`` (a path or URI).
    storage_options:
        Its option ``storageOptions``, where ``metrics`` is on an object store.
    """
    storage = parse_settings(storage_options, name="storageOptions")
    display = _notebook_display()
    stream = out or sys.stderr
    handle = None
    drawn = 0  # the lines of the last drawing, in a terminal
    shot: dict[str, Any] = {}
    while True:
        active = bool(query.isActive)
        shot = snapshot(metrics, storage=storage)
        text = render(shot)
        if display is not None:
            if handle is None:
                handle = display(_Plain(text), display_id=True)
            else:
                handle.update(_Plain(text))
        else:
            if drawn:  # up over the last drawing, cleared: redrawn in place (plain ANSI)
                stream.write(f"\x1b[{drawn}A\x1b[J")
            stream.write(text + "\n")
            stream.flush()
            drawn = text.count("\n") + 1
        if not active or shot["state"] == "finished":
            return shot
        time.sleep(interval)


class _Plain:
    """Plain text for IPython's display (a ``<pre>`` in a notebook)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.text)}</pre>"


def _notebook_display() -> Any:
    """IPython's ``display`` where a notebook kernel runs this, else ``None`` (lazy import)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return None
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return None
    ip = get_ipython()
    if ip is None or "ZMQ" not in type(ip).__name__:
        return None
    return display
