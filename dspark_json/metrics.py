"""What each partition did, where a Spark user looks: one INFO line from the ``dspark_json``
logger, and (option ``metrics``) one JSON record per partition in a directory that reads as a
table: ``spark.read.json(metrics_dir)``.

Spark gives a Python data source no custom-metrics hook that reaches ``StreamingQueryProgress``
(its ``sources[].metrics`` come from the JVM side only), so the records are files: one per
(micro-batch, partition), named by both so that a retried task replaces its record instead of
adding one, written atomically. The directory is checked writable at ``.load()``; a record that
cannot be written later is logged, never a failed task (its answers are paid for).

A record's ``batch`` is the micro-batch id (a number: the stream reader counts its micro-batches
in its offsets, which Spark checkpoints, so a restart takes up the count), ``offset`` the batch's
end offset; ``generate()`` records have no batch and a ``label`` instead. Read them back with
:data:`METRICS_SCHEMA`, so that ``http_status`` and ``rows`` are maps, not structs::

    spark.read.schema(dspark_json.metrics.METRICS_SCHEMA).json(metrics_dir)

On the driver, the stream reader logs one line per micro-batch from its records
(:func:`summary`); ``dspark-json metrics DIR`` prints the same lines for a finished run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from dspark_json.cost import Pricing, cost_usd
from dspark_json.fs import FileEntry, list_files, mask_uris, read_text, write_atomic
from dspark_json.http.secrets import MaskingFilter
from dspark_json.phases import stderr_logger
from dspark_json.records import Answers, RepairStats
from dspark_json.rows import ERROR, RESCUED_DATA
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

__all__ = [
    "METRICS_SCHEMA",
    "batch_id",
    "batch_label",
    "by_batch",
    "driver_logger",
    "file_prefix",
    "fold_records",
    "partition_metrics",
    "priced",
    "read_records",
    "report",
    "summary",
]

logger = logging.getLogger("dspark_json")

#: The records' schema (DDL) for ``spark.read.schema(METRICS_SCHEMA).json(dir)``: maps stay maps.
METRICS_SCHEMA = (
    "batch BIGINT, offset STRUCT<file: STRING, row: BIGINT>, label STRING, `partition` INT, "
    "at STRING, machine STRING, source STRING, prompts BIGINT, requests BIGINT, retries BIGINT, "
    "deduplicated BIGINT, cache_hits BIGINT, cache_misses BIGINT, cache_waits BIGINT, "
    "http_status MAP<STRING, BIGINT>, latency_ms STRUCT<p50: DOUBLE, p95: DOUBLE, p99: DOUBLE>, "
    "inflight_limit STRUCT<lowest: INT, peak: INT, final: INT>, endpoint_rests INT, "
    "held_seconds DOUBLE, shed BIGINT, "
    "prompt_tokens BIGINT, cached_tokens BIGINT, completion_tokens BIGINT, backend STRING, "
    "http_seconds DOUBLE, "
    "parse_seconds DOUBLE, parse_records_per_s DOUBLE, reference_rows BIGINT, "
    "reference_reasons MAP<STRING, BIGINT>, "
    "rows MAP<STRING, BIGINT>, dropped BIGINT, rescued_rows BIGINT, error_rows BIGINT, "
    "new_fields ARRAY<STRING>, "
    "repair STRUCT<reasks: BIGINT, `rows`: BIGINT, fixed: BIGINT, prompt_tokens: BIGINT, "
    "completion_tokens: BIGINT, budget: BIGINT, over_budget: BIGINT, from_journal: BIGINT, "
    "requests: BIGINT, retries: BIGINT, spent_tokens: BIGINT, estimated_tokens: BIGINT>, "
    "models MAP<STRING, STRUCT<`rows`: BIGINT, requests: BIGINT, prompt_tokens: BIGINT, "
    "completion_tokens: BIGINT, latency_p95_ms: DOUBLE, cost_usd: DOUBLE>>, cost_usd DOUBLE"
)


def batch_label(batch_id: int, end: Mapping[str, object]) -> str:
    """What a stream partition carries to its task to name its micro-batch (``batch`` of
    :func:`partition_metrics`): the id and the end offset, as JSON."""
    return json.dumps({"batch": batch_id, "offset": dict(end)}, sort_keys=True)


def batch_id(batch: str | None) -> int | None:
    """The micro-batch id a partition carries (:func:`batch_label`); ``None`` in a batch read."""
    return _batch_fields(batch)[0]


def _batch_fields(batch: str | None) -> tuple[int | None, Any, str | None]:
    """(batch id, end offset, label) from what a partition carries."""
    if batch is not None and batch.startswith("{"):
        try:
            named = json.loads(batch)
        except json.JSONDecodeError:
            named = None
        if isinstance(named, dict) and isinstance(named.get("batch"), int):
            return named["batch"], named.get("offset"), None
    return None, None, batch


def partition_metrics(
    answers: Answers,
    table: pa.Table,
    *,
    batch: str | None,
    partition: int,
    dropped: int,
    models: Sequence[str | None] | None = None,
) -> dict[str, Any]:
    """The metrics record of one partition (``table``: its rows before DROPMALFORMED;
    ``models``: each row's model, where more than one is in play)."""
    stats = answers.stats
    rows = len(answers.statuses)
    repair = answers.repair
    rescued = (
        table.column(RESCUED_DATA.name)
        if RESCUED_DATA.name in table.column_names
        else pa.nulls(0, pa.string())
    )
    batch_id, offset, label = _batch_fields(batch)
    from dspark_json.http.readings import MACHINE  # executor side: planning imports no asyncio

    return {
        "batch": batch_id,
        "offset": offset,
        "label": label,
        "partition": partition,
        "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        # Which machine ran the task (a digest of its host name): the driver counts a stream's
        # machines from its records (the pool's width: dspark_json.source.pool_width).
        "machine": f"{MACHINE:08x}",
        "source": answers.source,
        "prompts": rows,
        "requests": stats.requests,
        "retries": stats.retries,
        "deduplicated": stats.deduplicated,
        "cache_hits": stats.cache_hits,
        "cache_misses": stats.cache_misses,
        "cache_waits": stats.cache_waits,
        "http_status": dict(stats.statuses),
        "latency_ms": {
            name: None if (v := stats.latency(q)) is None else round(v * 1000, 1)
            for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
        },
        "inflight_limit": {
            "lowest": stats.limit_lowest,
            "peak": stats.limit_peak,
            "final": stats.limit_final,
        },
        "endpoint_rests": stats.endpoint_rests,
        # Option maxServerQueue: seconds new requests waited for room on a saturated endpoint.
        "held_seconds": round(stats.held_s, 3),
        # Answers that shed a request (llm-d's 429, a gateway with no endpoint yet): retried.
        "shed": stats.shed,
        # The first answers' tokens: the rows hold the last answers of the rows re-asked.
        "prompt_tokens": _usage(table, "prompt_tokens")
        + (repair.first_prompt_tokens - repair.last_prompt_tokens if repair else 0),
        # Of those, the ones the server's prefix cache held (vLLM:
        # --enable-prompt-tokens-details); the first answers' only where none was re-asked.
        "cached_tokens": _cached_tokens(table),
        "completion_tokens": _usage(table, "completion_tokens")
        + (repair.first_completion_tokens - repair.last_completion_tokens if repair else 0),
        "backend": answers.backend,
        "http_seconds": round(answers.http_seconds, 4),
        "parse_seconds": round(answers.parse_seconds, 4),
        "parse_records_per_s": round(rows / answers.parse_seconds)
        if answers.parse_seconds
        else None,
        "reference_rows": answers.reference_rows,
        "reference_reasons": dict(answers.reference_reasons),
        "rows": dict(Counter(answers.statuses)),
        "dropped": dropped,
        "rescued_rows": len(rescued) - rescued.null_count,
        "error_rows": _non_null_count(table, ERROR.name),
        "new_fields": _new_fields(rescued),
        "repair": None if repair is None else _repair(repair),
        "models": _by_model(answers, table, models),
    }


def _by_model(
    answers: Answers, table: pa.Table, models: Sequence[str | None] | None
) -> dict[str, dict[str, Any]] | None:
    """The figures of each model (rows, requests, tokens, latency p95), where the partition's
    rows asked more than one model; ``None`` otherwise (the record stays short)."""
    stats = answers.stats
    names = {*stats.model_requests, *(m for m in models or () if m is not None)}
    if len(names) < 2:
        return None
    rows: Counter[str] = Counter(m for m in models or () if m is not None)
    tokens = {part: Counter[str]() for part in ("prompt_tokens", "completion_tokens")}
    for part, counter in tokens.items():
        for model, used in zip(models or (), _usage_by_row(table, part), strict=False):
            if model is not None and used:
                counter[model] += used
    out: dict[str, dict[str, Any]] = {}
    for model in sorted(names):
        latencies = sorted(stats.model_latencies.get(model, ()))
        p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))] if latencies else None
        figures = {
            "rows": rows[model],
            "requests": stats.model_requests.get(model, 0),
            "prompt_tokens": tokens["prompt_tokens"][model],
            "completion_tokens": tokens["completion_tokens"][model],
            "latency_p95_ms": None if p95 is None else round(p95 * 1000, 1),
        }
        # A model named like a URL (a prompt line's, option 'model') may carry user:password@ or
        # a token=: the record (written to option 'metrics', shown in the batch line) has it
        # masked; two names the same once masked are added up.
        shown = mask_uris(model)
        if shown in out:
            figures = _added(out[shown], figures)
        out[shown] = figures
    return out


def priced(record: dict[str, Any], model: str | None, pricing: Pricing | None) -> dict[str, Any]:
    """``record`` with its cost (option ``pricing``): ``cost_usd``, in all and by model where
    the record has figures by model (their cached tokens are not told apart: priced as input,
    an upper bound); ``None`` where a model has no price."""
    if pricing is None:
        return record
    models = record.get("models")
    if models:
        costs = []
        for name, figures in models.items():
            figures["cost_usd"] = cost_usd(
                pricing, name, figures["prompt_tokens"], figures["completion_tokens"]
            )
            costs.append(figures["cost_usd"])
        record["cost_usd"] = None if None in costs else round(sum(costs), 6)
    else:
        record["cost_usd"] = cost_usd(
            pricing,
            model,
            record["prompt_tokens"],
            record["completion_tokens"],
            record.get("cached_tokens") or 0,
        )
    return record


def _added(one: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of two models (:func:`_by_model`) as one: counts added, the higher p95."""
    p95s = [p for p in (one["latency_p95_ms"], other["latency_p95_ms"]) if p is not None]
    return {
        **{part: one[part] + other[part] for part in one if part != "latency_p95_ms"},
        "latency_p95_ms": max(p95s) if p95s else None,
    }


def _repair(stats: RepairStats) -> dict[str, Any]:
    """The re-asks' part of the record (option repairAttempts)."""
    return {
        "reasks": stats.reasks,
        "rows": stats.rows,
        "fixed": stats.fixed,
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "budget": stats.budget,
        "over_budget": stats.over_budget,
        "spent_tokens": stats.spent_tokens,
        "estimated_tokens": stats.estimated_tokens,
        "from_journal": stats.from_journal,
        "requests": stats.client.requests,
        "retries": stats.client.retries,
    }


def report(
    record: dict[str, Any],
    what: str,
    directory: str | None,
    *,
    storage: StorageSettings = ENVIRONMENT_ONLY,
) -> None:
    """Log the record as one INFO line; write it under ``directory`` when given."""
    latency = record["latency_ms"]
    limit = record["inflight_limit"]
    logger.info(
        "%s: %d prompts (%s), rows %s; http %.2fs: %d requests, %d retries%s, codes %s, "
        "latency p50/p95/p99 %s/%s/%s ms, in-flight limit %d-%d%s; tokens %d in%s, %d out%s; "
        "parse %.3fs on %s (%d row(s) by the reference parser%s); rescued %d, errors %d%s%s",
        what,
        record["prompts"],
        record["source"],
        record["rows"] | ({"dropped": record["dropped"]} if record["dropped"] else {}),
        record["http_seconds"],
        record["requests"],
        record["retries"],
        _reuse_line(record),
        record["http_status"],
        latency["p50"],
        latency["p95"],
        latency["p99"],
        limit["lowest"],
        limit["peak"],
        _held(record.get("held_seconds")),
        record["prompt_tokens"],
        _cached(record.get("cached_tokens")),
        record["completion_tokens"],
        _cost(record.get("cost_usd")),
        record["parse_seconds"],
        record["backend"],
        record["reference_rows"],
        _reasons(record.get("reference_reasons")),
        record["rescued_rows"],
        record["error_rows"],
        f"; new fields {record['new_fields']}" if record["new_fields"] else "",
        _repair_line(record.get("repair")),
    )
    if directory is not None:
        name = f"{file_prefix(record)}part-{record['partition']:05d}.json"
        try:
            write_atomic(
                directory, name, (json.dumps(record) + "\n").encode("utf-8"), storage=storage
            )
        except (OSError, pa.ArrowException) as exc:  # a store may lack what a write needs
            logger.warning(
                "%s: the metrics record could not be written to %s (%s); the rows are not "
                "affected. Check option 'metrics'.",
                what,
                directory,
                exc,
            )


def _held(seconds: float | None) -> str:
    """Option maxServerQueue's hold, for the log lines: ``, held by the pool 3.2s``."""
    return f", held by the pool {seconds:.1f}s" if seconds else ""


def _cost(usd: float | None) -> str:
    """Option pricing's cost, for the log lines: ``, cost $0.0123``."""
    return f", cost ${usd:.4f}" if usd is not None else ""


def _cached(tokens: int | None) -> str:
    """The prompt tokens the server's prefix cache held, for the log lines: `` (40 cached)``,
    or nothing where the server reported none."""
    return f" ({tokens} cached)" if tokens else ""


def _reuse_line(record: Mapping[str, Any]) -> str:
    """Options dedupe and cache, for the log lines: ``, 5 row(s) deduplicated, cache 3 hit(s)
    / 2 miss(es)`` (``3 hit(s) (1 waited for)`` where another task was sending one), or
    nothing where neither served a row."""
    deduplicated = record.get("deduplicated") or 0
    hits, misses = record.get("cache_hits") or 0, record.get("cache_misses") or 0
    waits = record.get("cache_waits") or 0
    waited = f" ({waits} waited for)" if waits else ""
    return (f", {deduplicated} row(s) deduplicated" if deduplicated else "") + (
        f", cache {hits} hit(s){waited} / {misses} miss(es)" if hits or misses else ""
    )


def _reasons(reasons: dict[str, int] | None) -> str:
    """The reference parser's rows by reason, for the log line: ``: content_misfit 3``."""
    if not reasons:
        return ""
    return ": " + ", ".join(f"{reason} {rows}" for reason, rows in reasons.items())


def _repair_line(repair: dict[str, Any] | None) -> str:
    if not repair or (not repair["reasks"] and not repair["over_budget"]):
        return ""
    return (
        f"; re-asked {repair['rows']} row(s) {repair['reasks']} time(s), {repair['fixed']} "
        f"fixed, tokens {repair['prompt_tokens']} in, {repair['completion_tokens']} out"
        + (f", {repair['over_budget']} over budget" if repair["over_budget"] else "")
    )


def file_prefix(record: Mapping[str, Any]) -> str:
    """How the files of a record's micro-batch (or ``generate()`` task) are named: by its batch,
    offset and label, so that the driver reads a batch's records without reading the others."""
    named = json.dumps([record.get("batch"), record.get("offset"), record.get("label")])
    return f"batch-{hashlib.sha256(named.encode()).hexdigest()[:16]}-"


#: The bytes of a metrics record read at most (ours: a few KB; a file past it is not ours).
RECORD_LIMIT = 16 << 20


def read_records(
    directory: str,
    *,
    storage: StorageSettings = ENVIRONMENT_ONLY,
    batch: str | None = None,
    partitions: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """The metrics records under ``directory`` (a path or URI), in file name order; only those
    of one micro-batch where ``batch`` is what its partitions carried (:func:`batch_label`).
    With ``partitions`` (the batch's partition numbers, which the driver planned) the records
    are read by name, without listing the directory: a long run's driver reads a batch's
    records in a few reads however many batches the directory holds."""
    prefix = ""
    if batch is not None:
        batch_id, offset, label = _batch_fields(batch)
        prefix = file_prefix({"batch": batch_id, "offset": offset, "label": label})
    if batch is not None and partitions is not None:
        root = directory.rstrip("/")
        named = sorted(f"{prefix}part-{number:05d}.json" for number in set(partitions))
        entries = [FileEntry(name, f"{root}/{name}", 0) for name in named]
    else:
        entries = list_files(directory, suffixes=(".json",), storage=storage)
    records = []
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        try:
            text = read_text(entry.path, storage=storage, limit=RECORD_LIMIT)
            record = json.loads(text, parse_constant=_no_nan)
            if not isinstance(record, dict) or not _well_formed(record):
                raise ValueError("a field of the wrong type")
            records.append(record)
        except FileNotFoundError:
            continue  # a partition's record not written (yet): looked for again, or not there
        except (OSError, ValueError) as exc:  # a foreign file: said, not fatal
            logger.warning("metrics: %s is not a metrics record (%s); skipped", entry.path, exc)
    return records


#: The fields of a metrics record that hold a number (or ``null``); those that hold an object
#: of numbers; those of each model's figures (``models``) and of the re-asks (``repair``).
_NUMBERS = frozenset(
    {"partition", "prompts", "requests", "retries", "error_rows", "rescued_rows", "dropped",
     "shed", "deduplicated", "cache_hits", "cache_misses", "cache_waits", "prompt_tokens",
     "cached_tokens", "completion_tokens", "held_seconds", "parse_seconds", "cost_usd",
     "reference_rows"}
)  # fmt: skip
_COUNTS = frozenset(
    {"rows", "http_status", "latency_ms", "inflight_limit", "reference_reasons", "repair"}
)
_MODEL_NUMBERS = frozenset(
    {"rows", "requests", "prompt_tokens", "completion_tokens", "cost_usd", "latency_p95_ms"}
)


def _no_nan(constant: str) -> float:
    raise ValueError(f"{constant} is not a number a record holds")


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _well_formed(record: Mapping[str, Any]) -> bool:
    """Whether a record read back has the types :func:`summary`, the CLI and the report add
    up (a file edited by hand, or another program's JSON, is skipped with a WARN, not a
    crash)."""
    if not all(_is_number(record.get(field)) for field in _NUMBERS):
        return False
    for field in _COUNTS:
        value = record.get(field)
        if value is not None and not (
            isinstance(value, dict) and all(_is_number(v) for v in value.values())
        ):
            return False
    models = record.get("models")
    return models is None or (
        isinstance(models, dict)
        and all(
            isinstance(figures, dict) and all(_is_number(figures.get(f)) for f in _MODEL_NUMBERS)
            for figures in models.values()
        )
    )


def by_batch(records: Iterable[Mapping[str, Any]]) -> dict[int | None, list[Mapping[str, Any]]]:
    """The records grouped by micro-batch id, in id order (``None``: ``generate()``'s)."""
    groups: defaultdict[int | None, list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        groups[record.get("batch")].append(record)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))


#: The record's fields of options dedupe and cache.
_REUSE = ("deduplicated", "cache_hits", "cache_misses", "cache_waits")


def summary(records: Sequence[Mapping[str, Any]], what: str) -> str:
    """One line for ``records`` (a micro-batch's partitions, or a whole run): rows by status,
    rows with errors and rescued data, requests, retries, rows deduplicated and cache hits and
    misses (where any), tokens (and of them, cached), the re-asks (where any), p95
    latency (the highest of the partitions'), the parse backend and time, and the rows of the
    reference parser by reason (where any)."""
    whole = fold_records(records)  # how records add up: one definition, fold_records
    rows = Counter(whole["rows"])
    statuses = ", ".join(f"{status} {n}" for status, n in rows.most_common())
    p95 = whole["latency_ms"]["p95"]
    latency = f"latency p95 {p95:.0f} ms" if p95 else "no latency measured"
    dropped = whole["dropped"]
    return (
        f"{what}: {sum(rows.values())} rows ({statuses or 'none'})"
        f"{f', {dropped} dropped' if dropped else ''}; "
        f"{whole['error_rows']} with errors, {whole['rescued_rows']} with rescued data; "
        f"{whole['requests']} requests, {whole['retries']} retries{_shed_line(whole['shed'])}"
        f"{_reuse_line(whole)}; tokens {whole['prompt_tokens']} in"
        f"{_cached(whole['cached_tokens'])}, {whole['completion_tokens']} out"
        f"{_cost(whole['cost_usd'])}{_reasks([whole])}; "
        f"{latency}{_held(whole['held_seconds'])}; "
        f"parsed on {'/'.join(whole['backends']) or '-'} in {whole['parse_seconds']:.2f}s "
        f"({whole[FOLDED]} partition(s)){_reference([whole])}{_models_line([whole])}"
    )


#: The field of a record :func:`fold_records` made: how many partitions' records it holds.
FOLDED = "folded_partitions"


def _backends(record: Mapping[str, Any]) -> list[str]:
    backends = record.get("backends")
    return [str(b) for b in backends] if backends is not None else [str(record.get("backend"))]


def fold_records(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One record that :func:`summary` reads as it reads ``records`` (the same line): the
    counts summed, the p95s their highest, the backends and partitions kept. The driver folds
    a long run's records as they come, so that the whole-run line at stop holds in bounded
    memory however many micro-batches the run had."""
    counted = (
        "dropped", "error_rows", "rescued_rows", "requests", "retries", "shed", *_REUSE,
        "prompt_tokens", "cached_tokens", "completion_tokens", "reference_rows",
    )  # fmt: skip
    rows: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    models: dict[str, dict[str, Any]] = {}
    repairs = [r["repair"] for r in records if r.get("repair")]
    for record in records:
        rows.update(record.get("rows") or {})
        reasons.update(record.get("reference_reasons") or {})
        for model, figures in (record.get("models") or {}).items():
            into = models.setdefault(model, {})
            for part in ("rows", "requests", "prompt_tokens", "completion_tokens"):
                into[part] = (into.get(part) or 0) + (figures.get(part) or 0)
            for part, pick in (("cost_usd", _plus), ("latency_p95_ms", _highest)):
                if figures.get(part) is not None:
                    into[part] = pick(into.get(part), figures[part])
    p95s = [r["latency_ms"]["p95"] for r in records if (r.get("latency_ms") or {}).get("p95")]
    budgets = [repair.get("budget") for repair in repairs]
    repair_parts = (
        "reasks", "fixed", "prompt_tokens", "completion_tokens", "over_budget",
        "spent_tokens", "estimated_tokens",
    )  # fmt: skip
    return {
        "rows": dict(rows),
        **{key: sum(r.get(key) or 0 for r in records) for key in counted},
        "held_seconds": sum(r.get("held_seconds") or 0.0 for r in records),
        "parse_seconds": sum(r.get("parse_seconds") or 0.0 for r in records),
        "cost_usd": _total_cost(records),
        "latency_ms": {"p95": max(p95s) if p95s else None},
        "backends": sorted({b for r in records for b in _backends(r)}),
        "reference_reasons": dict(reasons),
        "models": models,
        "repair": {
            **{part: sum(r.get(part) or 0 for r in repairs) for part in repair_parts},
            "budget": sum(b for b in budgets if b is not None) if None not in budgets else None,
        }
        if repairs
        else None,
        FOLDED: sum(r.get(FOLDED) or 1 for r in records),
    }


def _plus(total: float | None, value: float) -> float:
    return (total or 0.0) + value


def _highest(highest: float | None, value: float) -> float:
    return value if highest is None else max(highest, value)


def _total_cost(records: Sequence[Mapping[str, Any]]) -> float | None:
    """The records' cost (option pricing), ``None`` where none has one."""
    costs = [r["cost_usd"] for r in records if r.get("cost_usd") is not None]
    return round(sum(costs), 6) if costs else None


def _shed_line(shed: int) -> str:
    """The requests the pool shed for :func:`summary` (`` (12 shed)``), or nothing."""
    return f" ({shed} shed)" if shed else ""


def _models_line(records: Sequence[Mapping[str, Any]]) -> str:
    """The figures by model for :func:`summary`, only where more than one model is in play:
    ``; by model: a 40 rows, 40 requests, tokens 900 in / 300 out, p95 12 ms; b ...``."""
    totals: dict[str, Counter[str]] = {}
    p95s: dict[str, list[float]] = {}
    costs: dict[str, float] = {}
    for record in records:
        for model, figures in (record.get("models") or {}).items():
            total = totals.setdefault(model, Counter())
            for part in ("rows", "requests", "prompt_tokens", "completion_tokens"):
                total[part] += figures.get(part) or 0
            if figures.get("cost_usd") is not None:
                costs[model] = costs.get(model, 0.0) + figures["cost_usd"]
            if figures.get("latency_p95_ms") is not None:
                p95s.setdefault(model, []).append(figures["latency_p95_ms"])
    if len(totals) < 2:
        return ""
    shown = sorted(totals, key=lambda m: -totals[m]["rows"])[:MODELS_SHOWN]
    parts = [
        f"{_model_name(model)} {t['rows']} rows, {t['requests']} requests, tokens "
        f"{t['prompt_tokens']} in / {t['completion_tokens']} out{_cost(costs.get(model))}, "
        + (f"p95 {max(p95s[model]):.0f} ms" if model in p95s else "no latency measured")
        for model, t in ((m, totals[m]) for m in shown)
    ]
    more = len(totals) - len(shown)
    return "; by model: " + "; ".join(parts) + (f"; {more} more model(s)" if more else "")


#: Models named in a batch line at most (the most rows first); the records hold them all.
MODELS_SHOWN = 10

_PLAIN_NAME = re.compile(r"[\w./:@+-]{1,80}")


def _model_name(model: str) -> str:
    """A model's name in the batch line: as is where it is plain, else quoted (a line feed or a
    ';' in a prompt line's model cannot break or forge the line), cut to 80 characters; the
    credentials of a URL-like name masked (:func:`~dspark_json.errors.mask_uris`)."""
    model = mask_uris(model)  # a record written before models were masked in it
    if _PLAIN_NAME.fullmatch(model):
        return model
    return repr(model if len(model) <= 80 else model[:77] + "...")


def _reasks(records: Sequence[Mapping[str, Any]]) -> str:
    """The re-asks of ``records`` for :func:`summary`: ``; re-asked 3 (fixed 2, tokens 90 in /
    40 out, 1 over budget)``, or nothing where there were none."""
    repairs = [r["repair"] for r in records if r.get("repair")]
    total = {
        part: sum(repair.get(part) or 0 for repair in repairs)
        for part in (
            "reasks",
            "fixed",
            "prompt_tokens",
            "completion_tokens",
            "over_budget",
            "spent_tokens",
            "estimated_tokens",
        )
    }
    if not total["reasks"] and not total["over_budget"]:
        return ""
    # repairTokenBudget is shared out over the batch's tasks: their shares add up to it.
    budgets = [repair.get("budget") for repair in repairs]
    budget = sum(b for b in budgets if b is not None) if None not in budgets else None
    return (
        f"; re-asked {total['reasks']} (fixed {total['fixed']}, tokens {total['prompt_tokens']} "
        f"in / {total['completion_tokens']} out"
        + (f" of a budget of {budget}" if budget is not None else "")
        + (
            f" ({total['spent_tokens']} counted, {total['estimated_tokens']} of them estimated "
            "from the answers' length: no usage reported)"
            if total["estimated_tokens"]
            else ""
        )
        + (f", {total['over_budget']} over budget" if total["over_budget"] else "")
        + ")"
    )


def _reference(records: Sequence[Mapping[str, Any]]) -> str:
    """The rows of the reference parser for :func:`summary`: ``; 3 rows parsed row by row
    (content_misfit 2, ...)``, or nothing where there were none. ``kernels_compiling`` is said
    as what it is, a new worker's first seconds (no fault)."""
    rows = sum(r.get("reference_rows") or 0 for r in records)
    if not rows:
        return ""
    reasons: Counter[str] = Counter()
    for record in records:
        reasons.update(record.get("reference_reasons") or {})
    why = ", ".join(
        f"{n} {_SAID[reason]}" if reason in _SAID else f"{reason} {n}"
        for reason, n in reasons.most_common()
    )
    return f"; {rows} rows parsed row by row" + (f" ({why})" if why else "")


#: How the batch line says a reason for parsing row by row, after its count (the others: their
#: word, then the count).
_SAID = {"kernels_compiling": "while a new worker's kernels compiled"}


def driver_logger() -> logging.Logger:
    """The logger of the per-batch lines on the driver (``dspark_json.batches``). Spark runs a
    stream reader in a Python process of its own, where nobody configures logging: there it
    writes INFO lines to stderr (Spark's console) itself; where logging is configured, it
    follows that configuration."""
    batches = logging.getLogger("dspark_json.batches")
    # The filter on logger "dspark_json" masks only what is logged through that logger itself:
    # a child logger's records pass its handlers, never its filters.
    if not any(isinstance(f, MaskingFilter) for f in batches.filters):
        batches.addFilter(MaskingFilter())
    return stderr_logger(batches.name)


def _non_null_count(table: pa.Table, column: str) -> int:
    if column not in table.column_names:
        return 0
    return int(table.num_rows - table.column(column).null_count)


def _new_fields(rescued: pa.Array | pa.ChunkedArray) -> list[str]:
    """The drift keys of ``_rescued_data`` (:func:`~dspark_json.parse.drift.new_fields`), sorted;
    the parser is imported here, where a task writes its record, not where the driver reads
    records back while Spark plans (a process started per call: issue 55)."""
    from dspark_json.parse import new_fields

    return sorted(new_fields(rescued))


def _cached_tokens(table: pa.Table) -> int:
    """The rows' ``usage.prompt_tokens_details.cached_tokens``, summed (0 where not reported)."""
    import pyarrow.compute as pc

    if "usage" not in table.column_names:
        return 0
    usage = table.column("usage")
    names = [f.name for f in usage.type]
    if "prompt_tokens_details" not in names:
        return 0
    details = pc.struct_field(usage, "prompt_tokens_details")
    if "cached_tokens" not in [f.name for f in details.type]:
        return 0
    total = pc.sum(pc.struct_field(details, "cached_tokens")).as_py()
    return int(total or 0)


def _usage_by_row(table: pa.Table, field: str) -> list[int | None]:
    """Each row's ``usage.<field>`` (``None`` where there is none)."""
    import pyarrow.compute as pc

    if "usage" not in table.column_names:
        return [None] * table.num_rows
    usage = table.column("usage")
    if field not in [f.name for f in usage.type]:
        return [None] * table.num_rows
    values: list[int | None] = pc.struct_field(usage, field).to_pylist()
    return values


def _usage(table: pa.Table, field: str) -> int:
    import pyarrow.compute as pc

    if "usage" not in table.column_names:
        return 0
    usage = table.column("usage")
    if field not in [f.name for f in usage.type]:
        return 0
    total = pc.sum(pc.struct_field(usage, field)).as_py()
    return int(total or 0)
