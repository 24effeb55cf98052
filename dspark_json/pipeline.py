"""What one Spark task does with its partition: prompts -> requests -> responses -> Arrow.

Rows out = prompts in: a prompt that cannot be sent, or whose request fails, still yields its row
(with ``_error`` and ``_status``); only DROPMALFORMED removes rows, and it says how many.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StringType, StructType

from dspark_json.errors import SchemaError
from dspark_json.http.client import complete_all
from dspark_json.http.request_body import RequestBuilder
from dspark_json.inputs.journal import Journal
from dspark_json.inputs.listing import Position, PromptPartition
from dspark_json.inputs.prompts import passthrough_column, read_segment
from dspark_json.inputs.recorded import read_recorded
from dspark_json.metrics import partition_metrics, report
from dspark_json.options import Query
from dspark_json.parse import make_parser, select_backend
from dspark_json.parse.convert import Converter, arrow_schema, dump_json
from dspark_json.records import Answers, Fetched, Outcome, PromptRecord
from dspark_json.rows import RESPONSE_COLUMNS, RowError, apply_mode, row_error
from dspark_json.schema.output import is_documented_extra
from dspark_json.schema.validation import schema_violations

__all__ = ["answer", "assemble", "fetch", "read_partition", "settle"]

logger = logging.getLogger("dspark_json")

#: Columns the pipeline adds itself (neither prompt fields nor parsed from the body).
_ADDED = frozenset({"_error", "_schema_violations"})


def check_no_new_fields(table: pa.Table, records: Sequence[PromptRecord]) -> None:
    """schemaEvolutionMode=failOnNewColumns: stop at the first fields the schema does not know."""
    if "_rescued_data" not in table.column_names:
        return
    new: dict[str, str] = {}
    for record, text in zip(records, table.column("_rescued_data").to_pylist(), strict=True):
        for key in json.loads(text) if text else {}:
            if not is_documented_extra(key):
                new.setdefault(key, record.describe())
    if new:
        listed = ", ".join(f"{k} (first in {where})" for k, where in sorted(new.items()))
        raise SchemaError(
            f"schemaEvolutionMode=failOnNewColumns: the answers carry fields the schema does "
            f"not know: {listed}. Pin them with option 'schemaHints' (e.g. "
            f"'{sorted(new)[0]} STRING'), give a schema with .schema(...) that has them, or set "
            "schemaEvolutionMode=rescue to keep them in _rescued_data."
        )


def fetch(records: Sequence[PromptRecord], query: Query) -> Fetched:
    """Send the prompts (rows with a problem are not sent); one outcome per row, in order."""
    options = query.options
    builder = RequestBuilder(options.request, query.model)
    return complete_all(
        [builder.build(r) if r.problem is None else None for r in records],
        options.http,
        stop_on_failure=options.rows.mode == "FAILFAST",
    )


def answer(
    records: Sequence[PromptRecord],
    query: Query,
    schema: StructType,
    *,
    fetched: Fetched | None = None,
    source: str = "server",
) -> Answers:
    """Parse the answers to ``records`` into the response columns of ``schema``; rows out =
    prompts in, in order.

    Parameters
    ----------
    records:
        The rows, in order.
    query:
        The query the driver settled.
    schema:
        The output schema (only its response columns are parsed here).
    fetched:
        The answers when already in hand (from the journal or a recording); else sent now.
    source:
        Where the answers came from, for the metrics: server, journal, recorded.
    """
    rows = query.options.rows
    backend = select_backend(rows.parse_mode)
    started = time.perf_counter()
    if fetched is None:
        fetched = fetch(records, query)
    http_done = time.perf_counter()
    # The parser always reports the status, even where the user's schema has no _status column.
    response_schema = StructType([f for f in schema.fields if f.name in RESPONSE_COLUMNS])
    if "_status" not in response_schema.names:
        response_schema = response_schema.add("_status", StringType())
    parser = make_parser(
        response_schema,
        backend,
        gpu_memory_fraction=rows.gpu_memory_fraction,
        lenient=rows.allow_unquoted_control_chars,
    )
    responses = parser.parse([o.body for o in fetched.outcomes])
    statuses = _statuses(records, fetched.outcomes, responses.column("_status").to_pylist())
    violations = None
    if query.options.schema.validate_schema and query.json_schema is not None:
        violations = schema_violations(query.json_schema, [o.body for o in fetched.outcomes])
    return Answers(
        responses=responses,
        outcomes=fetched.outcomes,
        statuses=statuses,
        stats=fetched.stats,
        backend=backend,
        http_seconds=http_done - started,
        parse_seconds=time.perf_counter() - http_done,
        reference_rows=parser.reference_rows,
        violations=violations,
        source=source,
    )


def read_partition(
    partition: PromptPartition, query: Query, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """Fetch (or replay) and parse one partition; yield one batch in exactly ``schema``."""
    records, fetched, source = _records_and_answers(partition, query)
    answers = answer(records, query, schema, fetched=fetched, source=source)
    prompt_schema = StructType(
        [f for f in schema.fields if f.name not in RESPONSE_COLUMNS and f.name not in _ADDED]
    )
    prompt_rows = [
        {"custom_id": r.custom_id, **{passthrough_column(k): v for k, v in r.fields.items()}}
        for r in records
    ]
    prompts, prompt_rescued = Converter(prompt_schema).table(prompt_rows)
    table = assemble(schema, prompts, prompt_rescued, records, answers)
    kept = settle(
        table,
        records,
        answers,
        query,
        batch=partition.batch,
        partition=partition.index,
        what=f"partition {partition.index}",
    )
    yield from kept.combine_chunks().to_batches(max_chunksize=max(len(records), 1)) or [
        pa.RecordBatch.from_pylist([], schema=kept.schema)
    ]


def settle(
    table: pa.Table,
    records: Sequence[PromptRecord],
    answers: Answers,
    query: Query,
    *,
    batch: str | None,
    partition: int,
    what: str,
) -> pa.Table:
    """The last steps of every partition, the source's and generate()'s alike: stop on new
    fields where schemaEvolutionMode asks, apply the mode, report the metrics. Returns the rows
    to hand to Spark."""
    options = query.options
    if options.schema.schema_evolution_mode == "failOnNewColumns":
        check_no_new_fields(table, records)
    keep = apply_mode(
        options.rows.mode,
        answers.statuses,
        describe=lambda i: records[i].describe(),
        detail=lambda i: f": {records[i].problem}" if records[i].problem else "",
        errors=[o.error for o in answers.outcomes],
    )
    kept = table if keep is None else table.filter(pa.array(keep, pa.bool_()))
    record = partition_metrics(
        answers, table, batch=batch, partition=partition, dropped=table.num_rows - kept.num_rows
    )
    report(record, what, options.rows.metrics)
    return kept


def _records_and_answers(
    partition: PromptPartition, query: Query
) -> tuple[list[PromptRecord], Fetched, str]:
    """The partition's rows and their answers: recorded ones (option responses), journaled
    ones (a replay or a retry), or fetched now and journaled before anything is yielded."""
    inputs = query.options.input
    if inputs.responses is not None:
        pairs = [pair for segment in partition.segments for pair in read_recorded(segment)]
        return [r for r, _ in pairs], Fetched(outcomes=[o for _, o in pairs]), "recorded"
    records = [r for segment in partition.segments for r in read_segment(segment)]
    if inputs.journal is None or not partition.segments:
        return records, fetch(records, query), "server"
    journal = Journal(inputs.journal)
    key = journal.key(partition.segments)
    recorded = journal.load(key)
    if recorded is not None and len(recorded) == len(records):
        logger.info(
            "partition %d: %d answers read from the journal (%s), none sent",
            partition.index,
            len(recorded),
            key,
        )
        return records, Fetched(outcomes=recorded), "journal"
    fetched = fetch(records, query)
    complete = all(
        o.body is not None or o.error is not None
        for r, o in zip(records, fetched.outcomes, strict=True)
        if r.problem is None
    )
    if complete:  # FAILFAST stops sending at the first failure: such a partial fetch is not kept
        last = partition.segments[-1]
        journal.save(key, Position(last.path.rsplit("/", 1)[-1], last.end), fetched.outcomes)
    return records, fetched, "server"


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


def assemble(
    schema: StructType,
    prompts: pa.Table,
    prompt_rescued: Sequence[dict[str, Any]],
    records: Sequence[PromptRecord],
    answers: Answers,
) -> pa.Table:
    """Join the prompt columns, the response columns and the per-row error into ``schema``."""
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    for name in prompts.column_names:
        columns[name] = prompts.column(name)
    for name in answers.responses.column_names:
        columns[name] = answers.responses.column(name)
    if "_status" in columns:
        columns["_status"] = pa.array(answers.statuses, pa.string())
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
        errors = [_error_of(r, o) for r, o in zip(records, answers.outcomes, strict=True)]
        columns["_error"] = pa.array(errors, target.field("_error").type)
    if "_schema_violations" in target.names:
        found = answers.violations or [None] * len(records)
        columns["_schema_violations"] = pa.array(found, target.field("_schema_violations").type)
    return pa.Table.from_arrays([columns[f.name] for f in target], schema=target)


def _error_of(record: PromptRecord, outcome: Outcome) -> RowError | None:
    if record.problem is not None:
        return row_error(
            status=None,
            type="invalid_prompt",
            message=f"{record.where}: {record.problem}",
            attempts=0,
        )
    return outcome.error


def _merge_rescued(parsed: list[str | None], extra: Sequence[dict[str, Any]]) -> pa.Array:
    merged: list[str | None] = []
    for text, more in zip(parsed, extra, strict=True):
        if not more:
            merged.append(text)
            continue
        combined: Mapping[str, Any] = {**more, **(json.loads(text) if text else {})}
        merged.append(dump_json(combined))
    return pa.array(merged, pa.string())
