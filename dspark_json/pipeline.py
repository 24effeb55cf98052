"""What one Spark task does with its partition: prompts -> requests -> responses -> Arrow.

Rows out = prompts in: a prompt that cannot be sent, or whose request fails, still yields its row
(with ``_error`` and ``_status``); only DROPMALFORMED removes rows, and it says how many.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StringType, StructType

from dspark_json.client import ClientConfig, Outcome, complete_all
from dspark_json.errors import RecordError
from dspark_json.inputs import PromptPartition, PromptRecord, passthrough_column, read_segment
from dspark_json.options import Options
from dspark_json.parse import make_parser, select_backend
from dspark_json.parse.convert import Converter, arrow_schema, dump_json
from dspark_json.schema import MALFORMED, RESPONSE_COLUMNS

__all__ = ["build_request", "read_partition"]

logger = logging.getLogger("dspark_json")


def build_request(record: PromptRecord, options: Options) -> dict[str, Any]:
    """The chat completion request body for one prompt."""
    body: dict[str, Any] = {"model": options.model, "messages": record.messages}
    if options.response_format is not None:
        title = str(options.response_format.get("title") or "response")
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": re.sub(r"[^A-Za-z0-9_-]", "_", title)[:64],
                "schema": options.response_format,
                "strict": True,
            },
        }
    return body


def read_partition(
    partition: PromptPartition, options: Options, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """Fetch and parse one partition's prompts; yield one batch in exactly ``schema``."""
    backend = select_backend(options.parse_mode)
    records = [r for segment in partition.segments for r in read_segment(segment)]
    started = time.perf_counter()
    outcomes = complete_all(
        [build_request(r, options) if r.problem is None else None for r in records],
        ClientConfig(
            endpoint=options.endpoint,
            max_concurrency=options.max_concurrency,
            request_timeout=options.request_timeout,
            max_attempts=options.max_attempts,
        ),
    )
    fetched = time.perf_counter()
    # The parser always reports the status, even where the user's schema has no _status column.
    response_schema = StructType([f for f in schema.fields if f.name in RESPONSE_COLUMNS])
    if "_status" not in response_schema.names:
        response_schema = response_schema.add("_status", StringType())
    parser = make_parser(response_schema, backend, gpu_memory_fraction=options.gpu_memory_fraction)
    responses = parser.parse([o.body for o in outcomes])
    parsed = time.perf_counter()
    row_status = _statuses(records, outcomes, responses.column("_status").to_pylist())
    table = _assemble(schema, records, outcomes, responses, row_status)
    statuses = Counter(row_status)
    kept = _apply_mode(
        table, options=options, records=records, outcomes=outcomes, row_status=row_status
    )
    if kept.num_rows < table.num_rows:
        statuses["dropped"] = table.num_rows - kept.num_rows
    table = kept
    logger.info(
        "partition %d: %d prompts, statuses %s, http %.2fs, parse %.3fs on %s "
        "(%d row(s) by the reference parser)",
        partition.index,
        len(records),
        dict(statuses),
        fetched - started,
        parsed - fetched,
        backend,
        parser.reference_rows,
    )
    yield from table.combine_chunks().to_batches(max_chunksize=max(len(records), 1)) or [
        pa.RecordBatch.from_pylist([], schema=table.schema)
    ]


def _statuses(
    records: Sequence[PromptRecord], outcomes: Sequence[Outcome], parsed: Sequence[str | None]
) -> list[str]:
    out = []
    for record, outcome, status in zip(records, outcomes, parsed, strict=True):
        if record.problem is not None:
            out.append("invalid_prompt")
        elif outcome.error is not None:
            out.append("http_error")
        else:
            out.append(status or "ok")
    return out


def _assemble(
    schema: StructType,
    records: Sequence[PromptRecord],
    outcomes: Sequence[Outcome],
    responses: pa.Table,
    statuses: Sequence[str],
) -> pa.Table:
    """Join the prompt columns, the response columns and the per-row error into ``schema``."""
    prompt_schema = StructType(
        [f for f in schema.fields if f.name not in RESPONSE_COLUMNS and f.name != "_error"]
    )
    prompt_rows = [
        {"custom_id": r.custom_id, **{passthrough_column(k): v for k, v in r.fields.items()}}
        for r in records
    ]
    prompts, prompt_rescued = Converter(prompt_schema).table(prompt_rows)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    for name in prompts.column_names:
        columns[name] = prompts.column(name)
    for name in responses.column_names:
        columns[name] = responses.column(name)
    if "_status" in columns:
        columns["_status"] = pa.array(statuses, pa.string())
    if "_corrupt_record" in columns:
        corrupt = columns["_corrupt_record"].to_pylist()
        columns["_corrupt_record"] = pa.array(
            [r.raw if r.problem else c for r, c in zip(records, corrupt, strict=True)], pa.string()
        )
    if "_rescued_data" in columns:
        columns["_rescued_data"] = _merge_rescued(
            columns["_rescued_data"].to_pylist(), prompt_rescued
        )
    target = arrow_schema(schema)
    if "_error" in target.names:
        errors = [_error_of(r, o) for r, o in zip(records, outcomes, strict=True)]
        columns["_error"] = pa.array(errors, target.field("_error").type)
    return pa.Table.from_arrays([columns[f.name] for f in target], schema=target)


def _error_of(record: PromptRecord, outcome: Outcome) -> dict[str, Any] | None:
    if record.problem is not None:
        return {
            "status": None,
            "type": "invalid_prompt",
            "message": f"{record.where}: {record.problem}",
            "attempts": 0,
        }
    return outcome.error


def _merge_rescued(parsed: list[str | None], extra: list[dict[str, Any]]) -> pa.Array:
    merged: list[str | None] = []
    for text, more in zip(parsed, extra, strict=True):
        if not more:
            merged.append(text)
            continue
        combined: Mapping[str, Any] = {**more, **(json.loads(text) if text else {})}
        merged.append(dump_json(combined))
    return pa.array(merged, pa.string())


def _apply_mode(
    table: pa.Table,
    *,
    options: Options,
    records: Sequence[PromptRecord],
    outcomes: Sequence[Outcome],
    row_status: Sequence[str],
) -> pa.Table:
    if options.mode == "PERMISSIVE":
        return table
    if options.mode == "FAILFAST":
        for record, outcome, status in zip(records, outcomes, row_status, strict=True):
            if status == "http_error" and outcome.error is not None:
                err = outcome.error
                raise RecordError(
                    f"mode=FAILFAST: the request for {record.describe()} failed after "
                    f"{err['attempts']} attempt(s): HTTP {err['status']}, {err['type']}: "
                    f"{err['message']}. Use mode=PERMISSIVE to keep such rows with _error."
                )
            if status in MALFORMED:
                raise RecordError(
                    f"mode=FAILFAST: {record.describe()} is malformed ({status}"
                    f"{': ' + record.problem if record.problem else ''}). Use mode=PERMISSIVE to "
                    "keep such rows with _corrupt_record, or DROPMALFORMED to drop them."
                )
        return table
    keep = [status not in MALFORMED for status in row_status]
    dropped = len(keep) - sum(keep)
    if dropped:
        logger.info("mode=DROPMALFORMED dropped %d malformed row(s) of %d", dropped, len(keep))
    return table.filter(pa.array(keep))
