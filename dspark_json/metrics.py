"""What each partition did, where a Spark user looks: one INFO line from the ``dspark_json``
logger, and (option ``metrics``) one JSON record per partition in a directory that reads as a
table: ``spark.read.json(metrics_dir)``.

Spark gives a Python data source no custom-metrics hook that reaches ``StreamingQueryProgress``
(its ``sources[].metrics`` come from the JVM side only), so the records are files: one per
(micro-batch, partition), named by both so that a retried task replaces its record instead of
adding one, written atomically. The directory is checked writable at ``.load()``; a record that
cannot be written later is logged, never a failed task (its answers are paid for).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dspark_json.fs import write_atomic
from dspark_json.records import Answers, RepairStats
from dspark_json.schema.output import new_fields

__all__ = ["partition_metrics", "report"]

logger = logging.getLogger("dspark_json")


def partition_metrics(
    answers: Answers,
    table: pa.Table,
    *,
    batch: str | None,
    partition: int,
    dropped: int,
) -> dict[str, Any]:
    """The metrics record of one partition (``table``: its rows before DROPMALFORMED)."""
    stats = answers.stats
    rows = len(answers.statuses)
    repair = answers.repair
    rescued = (
        table.column("_rescued_data")
        if "_rescued_data" in table.column_names
        else pa.nulls(0, pa.string())
    )
    return {
        "batch": batch,
        "partition": partition,
        "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "source": answers.source,
        "prompts": rows,
        "requests": stats.requests,
        "retries": stats.retries,
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
        # The first answers' tokens: the rows hold the last answers of the rows re-asked.
        "prompt_tokens": _usage(table, "prompt_tokens")
        + (repair.first_prompt_tokens - repair.last_prompt_tokens if repair else 0),
        "completion_tokens": _usage(table, "completion_tokens")
        + (repair.first_completion_tokens - repair.last_completion_tokens if repair else 0),
        "backend": answers.backend,
        "http_seconds": round(answers.http_seconds, 4),
        "parse_seconds": round(answers.parse_seconds, 4),
        "parse_records_per_s": round(rows / answers.parse_seconds)
        if answers.parse_seconds
        else None,
        "reference_rows": answers.reference_rows,
        "rows": dict(Counter(answers.statuses)),
        "dropped": dropped,
        "rescued_rows": len(rescued) - rescued.null_count,
        "error_rows": _non_null_count(table, "_error"),
        "new_fields": sorted(new_fields(rescued)),
        "repair": None if repair is None else _repair(repair),
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
        "from_journal": stats.from_journal,
        "requests": stats.client.requests,
        "retries": stats.client.retries,
    }


def report(record: dict[str, Any], what: str, directory: str | None) -> None:
    """Log the record as one INFO line; write it under ``directory`` when given."""
    latency = record["latency_ms"]
    limit = record["inflight_limit"]
    logger.info(
        "%s: %d prompts (%s), rows %s; http %.2fs: %d requests, %d retries, codes %s, latency "
        "p50/p95/p99 %s/%s/%s ms, in-flight limit %d-%d; tokens %d in, %d out; parse %.3fs on "
        "%s (%d row(s) by the reference parser); rescued %d, errors %d%s%s",
        what,
        record["prompts"],
        record["source"],
        record["rows"] | ({"dropped": record["dropped"]} if record["dropped"] else {}),
        record["http_seconds"],
        record["requests"],
        record["retries"],
        record["http_status"],
        latency["p50"],
        latency["p95"],
        latency["p99"],
        limit["lowest"],
        limit["peak"],
        record["prompt_tokens"],
        record["completion_tokens"],
        record["parse_seconds"],
        record["backend"],
        record["reference_rows"],
        record["rescued_rows"],
        record["error_rows"],
        f"; new fields {record['new_fields']}" if record["new_fields"] else "",
        _repair_line(record.get("repair")),
    )
    if directory is not None:
        batch = hashlib.sha256(str(record["batch"]).encode()).hexdigest()[:16]
        name = f"batch-{batch}-part-{record['partition']:05d}.json"
        try:
            write_atomic(directory, name, (json.dumps(record) + "\n").encode("utf-8"))
        except OSError as exc:
            logger.warning(
                "%s: the metrics record could not be written to %s (%s); the rows are not "
                "affected. Check option 'metrics'.",
                what,
                directory,
                exc,
            )


def _repair_line(repair: dict[str, Any] | None) -> str:
    if not repair or (not repair["reasks"] and not repair["over_budget"]):
        return ""
    return (
        f"; re-asked {repair['rows']} row(s) {repair['reasks']} time(s), {repair['fixed']} "
        f"fixed, tokens {repair['prompt_tokens']} in, {repair['completion_tokens']} out"
        + (f", {repair['over_budget']} over budget" if repair["over_budget"] else "")
    )


def _non_null_count(table: pa.Table, column: str) -> int:
    if column not in table.column_names:
        return 0
    return int(table.num_rows - table.column(column).null_count)


def _usage(table: pa.Table, field: str) -> int:
    if "usage" not in table.column_names:
        return 0
    usage = table.column("usage")
    if field not in [f.name for f in usage.type]:
        return 0
    total = pc.sum(pc.struct_field(usage, field)).as_py()
    return int(total or 0)
