"""What one Spark task does with its partition: prompts -> requests -> responses -> Arrow.

Rows out = prompts in: a prompt that cannot be sent, or whose request fails, still yields its row
(with ``_error`` and ``_status``); only DROPMALFORMED removes rows, and it says how many.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StringType, StructType

from dspark_json.buffers.arrow import contiguous_table
from dspark_json.errors import SchemaError
from dspark_json.http.reuse import send_once
from dspark_json.inputs.journal import Journal
from dspark_json.inputs.listing import Position, PromptPartition
from dspark_json.inputs.prompts import passthrough_row, read_segment
from dspark_json.inputs.recorded import read_recorded
from dspark_json.memory import keep_freed_memory_if_asked
from dspark_json.metrics import batch_id, partition_metrics, priced, report
from dspark_json.options import Query
from dspark_json.parse import RescueScope, make_parser, new_fields, select_backend
from dspark_json.phases import phase
from dspark_json.progress import finished, task_progress
from dspark_json.reask.options import RepairOptions
from dspark_json.records import Answers, Fetched, Outcomes, PromptRecord, PromptRows
from dspark_json.request.body import RequestBuilder
from dspark_json.response.answers import read_answers
from dspark_json.response.convert import Converter, arrow_schema, dump_json
from dspark_json.rows import (
    ATTEMPTS,
    COLUMNS,
    CORRUPT_RECORD,
    ERROR,
    RESCUED_DATA,
    SCHEMA_VIOLATIONS,
    STATUS,
    RowError,
    Status,
    apply_mode,
    row_error,
    status_of_error,
)
from dspark_json.schema.fit import PARSED, find_misfits, mark_misfits, warn_once
from dspark_json.schema.output import RESPONSE_COLUMNS, drift_keys, response_fields

if TYPE_CHECKING:  # imported where used: re-asks and validation need jsonschema, which a task
    # without options repairAttempts and validateSchema never loads (issue 55: start-up)
    from dspark_json.reask.rounds import Judged, Repaired, RoundStore

__all__ = [
    "answer",
    "assemble",
    "fetch",
    "read_partition",
    "run_partition",
    "settle",
]

logger = logging.getLogger("dspark_json")

#: Columns the pipeline adds itself (neither prompt fields nor parsed from the body).
_ADDED = frozenset(c.name for c in COLUMNS if c.stage != "parse")

#: The most rows in one batch handed to Spark: its own default for Arrow batches
#: (``spark.sql.execution.arrow.maxRecordsPerBatch``). One batch per partition made a read
#: slower inside Spark (figures: ``benchmarks/README.md``).
SPARK_BATCH_ROWS = 10_000


def check_no_new_fields(table: pa.Table, rows: PromptRows) -> None:
    """schemaEvolutionMode=failOnNewColumns: stop at the first fields the schema does not know."""
    if RESCUED_DATA.name not in table.column_names or not new_fields(table[RESCUED_DATA.name]):
        return
    new: dict[str, str] = {}
    for row, text in enumerate(table.column(RESCUED_DATA.name).to_pylist()):
        for key in drift_keys(text):
            new.setdefault(key, rows.describe(row))
    if new:
        listed = ", ".join(f"{k} (first in {where})" for k, where in sorted(new.items()))
        raise SchemaError(
            f"schemaEvolutionMode=failOnNewColumns: the answers carry fields the schema does "
            f"not know: {listed}. Pin them with option 'schemaHints' (e.g. "
            f"'{sorted(new)[0]} STRING'), give a schema with .schema(...) that has them, or set "
            "schemaEvolutionMode=rescue to keep them in _rescued_data."
        )


def fetch(records: Sequence[PromptRecord], query: Query) -> Fetched:
    """Send the prompts (rows with a problem are not sent); one outcome per row, in order.
    Identical requests are sent once and cached answers reused (options dedupe, cache)."""
    options = query.options
    builder = RequestBuilder(options.request, query.model)
    phase(
        ("sent", query.id),
        "First requests sent: %d prompt(s) of this task to model %s.",
        sum(r.problem is None for r in records),
        query.model,
    )
    return send_once(
        [builder.build(r) if r.problem is None else None for r in records],
        [builder.deterministic(r) for r in records],
        options.http,
        options.reuse,
        model=query.model,
        stop_on_failure=options.rows.mode == "FAILFAST",
        storage=options.storage.settings,
    )


def answer(
    rows: PromptRows,
    query: Query,
    schema: StructType,
    *,
    fetched: Fetched,
    source: str = "server",
    http_seconds: float = 0.0,
    rounds: RoundStore | None = None,
    repair_options: RepairOptions | None = None,
) -> Answers:
    """Parse the answers to ``rows`` into the response columns of ``schema``; rows out =
    prompts in, in order.

    Parameters
    ----------
    rows:
        The rows, in order.
    query:
        The query the driver settled.
    schema:
        The output schema (only its response columns are parsed here).
    fetched:
        Their answers: sent now (:func:`fetch`), or read back from the journal or a recording.
    source:
        Where the answers came from, for the metrics: server, journal, recorded.
    http_seconds:
        What getting them took, for the metrics.
    rounds:
        Where the re-asks of option ``repairAttempts`` are journaled (and read back on a
        replay); ``None``: not journaled.
    repair_options:
        The re-ask options of this task (its share of repairTokenBudget); ``None``: the
        query's.
    """
    options = query.options.rows
    backend = select_backend(options.parse_mode)
    http_done = time.perf_counter()
    # The parser always reports the status, even where the user's schema has no _status column,
    # and the rescued values where there is a parsed column: a value that does not fit its field
    # is found there (schema_mismatch). Where the user's schema has no _rescued_data column,
    # only what is rescued under parsed is read: the envelope's unknown keys are not gathered.
    response_schema = response_fields(schema)
    rescue: RescueScope = "all"
    if STATUS.name not in response_schema.names:
        response_schema = response_schema.add(STATUS.field)
    if PARSED in response_schema.names and RESCUED_DATA.name not in response_schema.names:
        response_schema = response_schema.add(RESCUED_DATA.field)
        rescue = "parsed"
    parser = make_parser(
        response_schema,
        backend,
        gpu_memory_fraction=options.gpu_memory_fraction,
        lenient=options.allow_unquoted_control_chars,
        rescue=rescue,
    )
    outcomes = fetched.outcomes
    responses = parser.parse(outcomes.bodies)
    statuses = _statuses(rows, outcomes, responses.column(STATUS.name))
    violations = _violations(query, responses, outcomes.bodies)
    reference_rows = parser.reference_rows  # of this parse (the re-asks' parses have their own)
    reference_reasons = dict(parser.reference_reasons)
    attempts, repaired, repair_seconds = None, None, 0.0
    if query.options.repair.repair_attempts and source != "recorded":
        from dspark_json.reask.rounds import Judged

        started = time.perf_counter()
        judged = Judged(parsed=responses, statuses=statuses, violations=violations)
        done = _reask(
            rows,
            query,
            parse=parser.parse,
            first=outcomes,
            judged=judged,
            rounds=rounds,
            options=repair_options or query.options.repair,
        )
        repair_seconds = time.perf_counter() - started
        attempts, repaired = done.attempts, done.stats
        if done.stats.rows:  # the rows hold the last answers
            outcomes = done.outcomes
            responses = parser.parse(outcomes.bodies)
            reference_rows = parser.reference_rows
            reference_reasons = dict(parser.reference_reasons)
            statuses = _statuses(rows, outcomes, responses.column(STATUS.name))
            if violations is not None:
                changed = sorted(i for i, tried in done.attempts.items() if len(tried) > 1)
                found = _violations(query, responses, outcomes.bodies, changed)
                for i, listed in zip(changed, found or [], strict=True):
                    violations[i] = listed
    misfits = _misfits(rows, query, schema, responses, statuses)
    if attempts:  # a row's last answer says what the row says (re-asks judge the parse)
        for row, misfit in misfits.items():
            tried = attempts.get(row)
            if tried:
                tried[-1]["status"] = Status.SCHEMA_MISMATCH.value
                tried[-1]["reason"] = tried[-1]["reason"] or f"{misfit} (not re-asked)"
    return Answers(
        responses=responses,
        outcomes=outcomes,
        statuses=statuses,
        stats=fetched.stats,
        backend=parser.backend,  # where it parsed (the GPU backend's CPU kernels report cpu)
        http_seconds=http_seconds + repair_seconds,
        parse_seconds=time.perf_counter() - http_done - repair_seconds,
        reference_rows=reference_rows,
        reference_reasons=reference_reasons,
        violations=violations,
        source=source,
        attempts=attempts,
        repair=repaired,
        misfits=misfits,
    )


def _misfits(
    rows: PromptRows, query: Query, schema: StructType, responses: pa.Table, statuses: list[str]
) -> dict[int, str]:
    """The ``ok`` rows whose answer holds a value that does not fit its field of ``parsed``
    become ``schema_mismatch`` (in ``statuses``), with one WARN per query in this process
    (:mod:`dspark_json.schema.fit`). Returns each such row's misfit, described."""
    if PARSED not in schema.names or RESCUED_DATA.name not in responses.column_names:
        return {}
    rescued = responses.column(RESCUED_DATA.name)
    found = find_misfits(rescued, schema[PARSED].dataType, new_fields(rescued))
    marked = mark_misfits(statuses, found)
    warn_once(query.id, marked, rows.describe, rows=len(rows))
    return {row: misfit.describe() for row, misfit in marked.items()}


def _reask(
    rows: PromptRows,
    query: Query,
    *,
    parse: Callable[[pa.Array], pa.Table],
    first: Outcomes,
    judged: Judged,
    rounds: RoundStore | None,
    options: RepairOptions,
) -> Repaired:
    """Option repairAttempts: re-ask the rows ``judged`` finds wrong; each round's answers are
    judged by the same parser and validator as the first ones."""

    from dspark_json.reask.rounds import Judged, repair

    def judge(some: Outcomes) -> Judged:
        parsed = parse(some.bodies)
        found = pc.fill_null(parsed.column(STATUS.name), Status.OK.value).to_pylist()
        for row, error in some.errors.items():
            found[row] = status_of_error(error)
        violations = _violations(query, parsed, some.bodies)
        return Judged(parsed=parsed, statuses=found, violations=violations)

    return repair(
        rows.record,
        first,
        judged,
        options=options,
        builder=RequestBuilder(query.options.request, query.model),
        http=query.options.http,
        judge=judge,
        store=rounds,
        context=query.context,
        dedupe=query.options.reuse.dedupe,
    )


def _violations(
    query: Query, parsed: pa.Table, bodies: pa.Array, rows: Sequence[int] | None = None
) -> list[list[str] | None] | None:
    """With option validateSchema: how each answer (of ``rows``, default all) breaks the JSON
    Schema, from the parser's table ``parsed`` of ``bodies``
    (:func:`~dspark_json.response.answers.read_answers`); else ``None``. The answers become
    Python only then: a partition's worth of them cost about 5 % of the source's Python time
    inside Spark (py-spy, issue 38), the option off as well."""
    if not query.options.schema.validate_schema:
        return None
    from dspark_json.schema.validation import schema_violations, tool_violations

    answers = read_answers(parsed, bodies, rows)
    found = (
        schema_violations(query.json_schema, [a.content for a in answers])
        if query.json_schema is not None
        else None
    )
    tools = query.options.request.tools
    if tools is not None:
        calls = tool_violations(tools, [a.calls for a in answers])
        found = (
            calls if found is None else [_joined(a, b) for a, b in zip(found, calls, strict=True)]
        )
    return found


def _joined(a: list[str] | None, b: list[str] | None) -> list[str] | None:
    return None if a is None and b is None else [*(a or ()), *(b or ())]


def read_partition(
    partition: PromptPartition, query: Query, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """Fetch (or replay) and parse one partition; yield it in exactly ``schema``, in batches of
    at most :data:`SPARK_BATCH_ROWS` rows. A partition of ``parts`` (a compressed file's rows)
    is read part after part."""
    if partition.parts:
        for part in partition.parts:
            shared = replace(
                part,
                batch=partition.batch,
                tokens_per_minute=partition.tokens_per_minute,
                pool_width=partition.pool_width,
                tokens_spent=partition.tokens_spent,
            )
            yield from read_partition(shared, query, schema)
        return
    keep_freed_memory_if_asked()  # DSPARK_JSON_KEEP_MEMORY=1: the next partition reuses buffers
    # parseMode=gpu without a usable GPU fails here, before the prompts are sent (and paid for).
    select_backend(query.options.rows.parse_mode)
    started = time.perf_counter()
    if partition.tokens_per_minute is not None or partition.pool_width is not None:
        http = replace(  # the task's share of maxTokensPerMinute, the pool's width (planning)
            query.options.http,
            max_tokens_per_minute=partition.tokens_per_minute
            if partition.tokens_per_minute is not None
            else query.options.http.max_tokens_per_minute,
            pool_width=partition.pool_width,
            tokens_spent=partition.tokens_spent,
        )
        query = replace(query, options=replace(query.options, http=http))
    options = query.options
    with task_progress(  # option metrics: the task's progress every few seconds
        options.rows.metrics,
        storage=options.storage.settings,
        batch=batch_id(partition.batch),
        partition=partition.index,
        prompts=partition.rows,
        model=query.model,
        pricing=options.rows.pricing,
    ):
        rows, fetched, source, rounds = _rows_and_answers(partition, query)
        repair_options = options.repair
        if partition.repair_token_budget is not None:  # the task's share of the batch's budget
            repair_options = replace(
                repair_options, repair_token_budget=partition.repair_token_budget
            )
        kept = run_partition(
            rows,
            query,
            schema,
            fetched,
            started=started,
            batch=partition.batch,
            partition=partition.index,
            what=f"partition {partition.index}",
            source=source,
            rounds=rounds,
            repair_options=repair_options,
        )
    yield from contiguous_table(kept).to_batches(max_chunksize=SPARK_BATCH_ROWS) or [
        pa.RecordBatch.from_pylist([], schema=kept.schema)
    ]


def run_partition(
    rows: PromptRows,
    query: Query,
    schema: StructType,
    fetched: Fetched,
    *,
    started: float,
    batch: str | None,
    partition: int,
    what: str,
    source: str = "server",
    rounds: RoundStore | None = None,
    repair_options: RepairOptions | None = None,
    leading: pa.Table | None = None,
) -> pa.Table:
    """One partition from its answers on, the source's and ``generate()``'s alike: parse them
    (and re-ask, :func:`answer`), assemble the rows into ``schema`` (:func:`assemble`), settle
    them (:func:`settle`). Returns the rows to hand to Spark.

    Parameters
    ----------
    rows, fetched:
        The partition's rows and their answers (fetched since ``started``, a
        ``time.perf_counter()``), from ``source`` (see :func:`answer`, as ``rounds`` and
        ``repair_options``).
    schema:
        The columns to fill: the prompt columns in it come from ``rows``.
    batch, partition, what:
        Where the metrics file them, and the partition's name in the log (:func:`settle`).
    leading:
        Columns put before ``schema``'s (``generate()``: the DataFrame's own).
    """
    answers = answer(
        rows,
        query,
        schema,
        fetched=fetched,
        source=source,
        http_seconds=time.perf_counter() - started,
        rounds=rounds,
        repair_options=repair_options,
    )
    compiling = answers.reference_reasons.get("kernels_compiling")
    if compiling:
        phase(
            ("kernels", query.id),
            "Kernels compiling in the background: %d row(s) of %s parsed row by row meanwhile "
            "(same results; the next batches take the kernels).",
            compiling,
            what,
        )
    prompt_schema = StructType(
        [f for f in schema.fields if f.name not in RESPONSE_COLUMNS and f.name not in _ADDED]
    )
    prompts, prompt_rescued = _prompt_columns(prompt_schema, rows)  # none for generate()
    table = assemble(schema, prompts, prompt_rescued, rows, answers)
    if leading is not None:
        table = pa.Table.from_arrays(
            [*leading.columns, *table.columns], names=[*leading.column_names, *table.column_names]
        )
    return settle(table, rows, answers, query, batch=batch, partition=partition, what=what)


def _prompt_columns(
    prompt_schema: StructType, rows: PromptRows
) -> tuple[pa.Table, Sequence[dict[str, Any]] | None]:
    """The prompt columns of ``rows`` (``custom_id`` and the fields passed through) in
    ``prompt_schema``, and what each row rescues (``None``: nothing)."""
    if rows.fields is None and all(isinstance(f.dataType, StringType) for f in prompt_schema):
        # No row has fields: custom_id as it is, the other prompt columns null.
        n = len(rows)
        ids = pa.array(rows.custom_ids, pa.string())
        columns = [
            ids if f.name == "custom_id" else pa.nulls(n, pa.string()) for f in prompt_schema
        ]
        return pa.Table.from_arrays(columns, schema=arrow_schema(prompt_schema)), None
    fields = rows.fields or [{}] * len(rows)
    prompt_rows = [
        {"custom_id": custom_id, **passthrough_row(more)}
        for custom_id, more in zip(rows.custom_ids, fields, strict=True)
    ]
    return Converter(prompt_schema).table(prompt_rows)


def settle(
    table: pa.Table,
    rows: PromptRows,
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
        check_no_new_fields(table, rows)
    keep = apply_mode(
        options.rows.mode,
        answers.statuses,
        describe=rows.describe,
        detail=lambda i: _why_malformed(rows, answers, i),
        errors=answers.outcomes.errors,
    )
    kept = table if keep is None else table.filter(pa.array(keep, pa.bool_()))
    record = partition_metrics(
        answers,
        table,
        batch=batch,
        partition=partition,
        dropped=table.num_rows - kept.num_rows,
        models=_row_models(rows, answers, query),
    )
    priced(record, query.model, options.rows.pricing)
    report(record, what, options.rows.metrics, storage=options.storage.settings)
    finished(record)  # the task's progress takes the record's figures
    return kept


def _why_malformed(rows: PromptRows, answers: Answers, row: int) -> str:
    """What to add after a malformed row's status in FAILFAST's message: the prompt's problem,
    or the value that did not fit (``schema_mismatch``)."""
    why = rows.problems.get(row) or answers.misfits.get(row)
    return f": {why}" if why else ""


def _row_models(rows: PromptRows, answers: Answers, query: Query) -> list[str | None] | None:
    """Each row's model (a prompt line's own, else the query's), for the metrics by model;
    ``None`` where the answers were not asked now or one model is all there is."""
    errors = answers.outcomes.errors.values()
    several = len(answers.stats.model_requests) > 1
    if answers.source != "server" or not (
        several or any(e["type"] == "model_unavailable" for e in errors)
    ):
        return None
    models: list[str | None] = []
    for i in range(len(rows)):
        asked = (rows.record(i).overrides or {}).get("model", query.model)
        models.append(asked if isinstance(asked, str) else None)
    return models


def _rows_and_answers(
    partition: PromptPartition, query: Query
) -> tuple[PromptRows, Fetched, str, RoundStore | None]:
    """The partition's rows and their answers: recorded ones (option responses), journaled
    ones (a replay or a retry), or fetched now and journaled before anything is yielded; and
    where the re-asks of those answers are journaled (``None``: nowhere)."""
    inputs = query.options.input
    if inputs.responses is not None:
        rows, outcomes = read_recorded(
            partition.segments, max_bytes=query.options.http.max_response_bytes
        )
        return rows, Fetched(outcomes=outcomes), "recorded", None
    records = [r for segment in partition.segments for r in read_segment(segment)]
    if inputs.journal is None or not partition.segments:
        return PromptRows.of(records), fetch(records, query), "server", None
    journal = Journal(inputs.journal, storage=query.options.storage.settings)
    key = journal.key(partition.segments)
    last = partition.segments[-1]
    end = Position(last.path.rsplit("/", 1)[-1], last.end)
    recorded = journal.load(key)
    if recorded is not None and len(recorded) == len(records):
        logger.info(
            "partition %d: %d answers read from the journal (%s), none sent",
            partition.index,
            len(recorded),
            key,
        )
        rounds = _Rounds(journal, key, end, replay=True)
        return PromptRows.of(records), Fetched(outcomes=recorded), "journal", rounds
    fetched = fetch(records, query)
    bodies = fetched.outcomes.bodies.is_valid().to_pylist()
    complete = all(
        bodies[i] or i in fetched.outcomes.errors
        for i, r in enumerate(records)
        if r.problem is None
    )
    if not complete:  # FAILFAST stops sending at the first failure: such a fetch is not kept
        return PromptRows.of(records), fetched, "server", None
    journal.save(key, end, fetched.outcomes)
    return PromptRows.of(records), fetched, "server", _Rounds(journal, key, end, replay=False)


class _Rounds:
    """A partition's re-ask rounds in the journal, next to its first answers; read back only
    on a replay (first answers asked now make rounds of their own)."""

    def __init__(self, journal: Journal, key: str, end: Position, *, replay: bool) -> None:
        self.journal, self.key, self.end, self.replay = journal, key, end, replay

    def load(self, round: int) -> tuple[list[int], Outcomes] | None:
        return self.journal.load_round(self.key, round) if self.replay else None

    def save(self, round: int, rows: list[int], outcomes: Outcomes) -> None:
        self.journal.save_round(self.key, round, self.end, rows, outcomes)


def _statuses(rows: PromptRows, outcomes: Outcomes, parsed: pa.ChunkedArray) -> list[str]:
    """Each row's ``_status``: ``invalid_prompt``, ``http_error``, or the parser's."""
    out: list[str] = pc.fill_null(parsed, Status.OK.value).to_pylist()
    for row, error in outcomes.errors.items():
        out[row] = status_of_error(error)
    for row in rows.problems:
        out[row] = Status.INVALID_PROMPT
    return out


def assemble(
    schema: StructType,
    prompts: pa.Table,
    prompt_rescued: Sequence[dict[str, Any]] | None,
    rows: PromptRows,
    answers: Answers,
) -> pa.Table:
    """Join the prompt columns, the response columns and the per-row error into ``schema``
    (``prompt_rescued``: what each row's prompt fields rescue; ``None``: nothing)."""
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    for name in prompts.column_names:
        columns[name] = prompts.column(name)
    for name in answers.responses.column_names:
        columns[name] = answers.responses.column(name)
    if STATUS.name in columns:
        columns[STATUS.name] = pa.array(answers.statuses, pa.string())
    if CORRUPT_RECORD.name in columns and rows.problems:
        corrupt = columns[CORRUPT_RECORD.name].to_pylist()
        for row in rows.problems:
            corrupt[row] = rows.record(row).raw
        columns[CORRUPT_RECORD.name] = pa.array(corrupt, pa.string())
    if RESCUED_DATA.name in columns and prompt_rescued is not None and any(prompt_rescued):
        columns[RESCUED_DATA.name] = _merge_rescued(
            columns[RESCUED_DATA.name].to_pylist(), prompt_rescued
        )
    target = arrow_schema(schema)
    for name, fill in _FILLS.items():
        if name in target.names:
            columns[name] = pa.array(fill(rows, answers), target.field(name).type)
    return pa.Table.from_arrays([columns[f.name] for f in target], schema=target)


def _errors(rows: PromptRows, answers: Answers) -> list[RowError | None]:
    """``_error``: the request's, or why the prompt could not be sent."""
    errors: list[RowError | None] = [None] * len(rows)
    for row, error in answers.outcomes.errors.items():
        errors[row] = error
    for row in rows.problems:
        errors[row] = _prompt_error(rows.record(row))
    return errors


def _attempts(rows: PromptRows, answers: Answers) -> list[Any]:
    """``_attempts``: each answer to a re-asked row; null where the first answer was right."""
    tried: list[Any] = [None] * len(rows)
    for row, attempts in (answers.attempts or {}).items():
        tried[row] = attempts
    return tried


#: The system columns the pipeline fills itself (registry entries whose stage is not the
#: parser's) -> each row's value. A new such column: its entry in :data:`dspark_json.rows.COLUMNS`
#: and its function here.
_FILLS: Mapping[str, Callable[[PromptRows, Answers], Sequence[Any]]] = {
    ERROR.name: _errors,
    SCHEMA_VIOLATIONS.name: lambda rows, answers: answers.violations or [None] * len(rows),
    ATTEMPTS.name: _attempts,
}


def _prompt_error(record: PromptRecord) -> RowError:
    """The ``_error`` of a row that could not be sent."""
    return row_error(
        status=None,
        type="invalid_prompt",
        message=f"{record.where}: {record.problem}",
        attempts=0,
    )


def _merge_rescued(parsed: list[str | None], extra: Sequence[dict[str, Any]]) -> pa.Array:
    merged: list[str | None] = []
    for text, more in zip(parsed, extra, strict=True):
        if not more:
            merged.append(text)
            continue
        combined: Mapping[str, Any] = {**more, **(json.loads(text) if text else {})}
        merged.append(dump_json(combined))
    return pa.array(merged, pa.string())
