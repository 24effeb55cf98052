"""The ``dspark-json`` Spark data source: options and schema on the driver, work on executors.

Thin on purpose: options live in :mod:`dspark_json.options`, the offset model in
:mod:`dspark_json.inputs.listing`, the per-partition work in :mod:`dspark_json.pipeline`, and what
differs between Spark versions in :mod:`dspark_json.compat`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from dspark_json.compat import AvailableNowTrigger, default_read_limit, read_caps
from dspark_json.errors import short_errors
from dspark_json.fs import FileEntry
from dspark_json.http.secrets import REDACTION_PATTERN
from dspark_json.inputs.journal import Journal
from dspark_json.inputs.listing import (
    MIN_PARTITION_SIZE,
    Position,
    PromptListing,
    PromptPartition,
    Segment,
    partition_size,
    plan_partitions,
    row_count,
)
from dspark_json.metrics import (
    batch_label,
    driver_logger,
    fold_records,
    read_records,
    summary,
)
from dspark_json.options import FORMAT, Options, Query
from dspark_json.phases import phase
from dspark_json.progress import compact, write_batch, write_run
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.datasource import ReadLimit

# Spark starts a Python process for each planning or commit call (partitions, latestOffset,
# commit), which unpickles this module's classes: what only the driver's ``schema()`` (the
# server's checks: :mod:`dspark_json.load`, httpx) or a task's ``read`` (the pipeline, the
# parser: numba) needs is imported where it is used (issue 55; tests/test_lazy_imports.py).

__all__ = ["DSparkJsonDataSource", "session_slots", "with_slots"]

#: Partitions' records the driver keeps for the whole-run line before folding them into one
#: (:func:`dspark_json.metrics.fold_records`: the same line, in bounded memory).
_FOLD_PAST = 256

logger = logging.getLogger("dspark_json")


#: The key of a stream offset that counts the micro-batches planned up to it (Spark gives a
#: source no batch id). Spark checkpoints the offsets, so a restarted reader takes the count up
#: from the offset Spark hands it; an offset before any batch (and one checkpointed before the
#: count was kept) has none: 0.
BATCHES = "batches"
#: The key of a stream offset that keeps the prompts per task its micro-batch was planned with
#: when option partitionSize leaves them to the planner: a batch Spark replays after a restart
#: is cut into the same partitions (its journal entries are found), whatever the slots known
#: then.
PARTITION_SIZE = "partitionSize"


def _batches(offset: Mapping[str, object]) -> int:
    """How many micro-batches were planned up to ``offset``."""
    count = offset.get(BATCHES, 0)
    return count if isinstance(count, int) else 0


class DSparkJsonDataSource(DataSource):
    """Reads prompts, asks a vLLM / OpenAI-compatible server, yields the typed answers.

    Spark passes the ``.option(...)`` values as ``self.options``; they are parsed (and checked)
    on first use, and the server is contacted only where Spark asks for a schema or a reader.
    """

    #: Registered by ``dspark_json.register(spark)``, which also makes Spark redact the secret
    #: options from plans; ``False``: by Spark's lookup of installed modules
    #: (:mod:`pyspark_dspark_json`), which does not.
    registered_by_session: ClassVar[bool] = True
    #: The cluster's task slots (Spark's default parallelism) when the format was registered by
    #: ``dspark_json.register(spark)`` (:func:`with_slots`): what the planner shares a
    #: micro-batch's prompts by where option partitionSize is not given; ``None``: not known.
    task_slots: ClassVar[int | None] = None

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @property
    def parsed_options(self) -> Options:
        """The options, parsed and checked (an :class:`OptionError` names a bad one)."""
        cached: Options | None = self.__dict__.get("_parsed_options")
        if cached is None:
            cached = self.__dict__["_parsed_options"] = Options.parse(self.options)
        return cached

    @property
    def query(self) -> Query:
        """The query as the driver settles it (server checks, model, JSON Schema), once.

        Kept on the instance: Spark pickles the source after ``schema()`` and builds the reader
        or stream reader from that copy (in another process, or another Python worker), which
        then does not check the server again. A source that Spark builds afresh (a new query, or
        one planned again) checks the server again: a restarted server may serve another model.
        Nothing is kept in the process beyond the instance.
        """
        cached: Query | None = self.__dict__.get("_query")
        if cached is None:
            from dspark_json.load import prepare

            cached = self.__dict__["_query"] = prepare(self.parsed_options)
            if not self.registered_by_session:
                _warn_unredacted(self.options)
        return cached

    @short_errors
    def schema(self) -> StructType:
        from dspark_json.inputs.prompts import infer_passthrough
        from dspark_json.load import resolve_schema

        query = self.query
        passthrough = []
        if query.options.input.responses is None:
            passthrough = infer_passthrough(_listing(query.options))
        resolved = self.__dict__["_resolved_schema"] = resolve_schema(query, passthrough)
        return resolved

    @short_errors
    def reader(self, schema: StructType) -> DataSourceReader:
        self._check(schema)
        _workers_start(self.query)
        return PromptBatchReader(self.query, schema, self.task_slots)

    @short_errors
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check(schema)
        _workers_start(self.query)
        return PromptStreamReader(self.query, schema, self.task_slots)

    def _check(self, schema: StructType) -> None:
        """A schema the parser can fill; a user's (``.schema(...)``: not the one
        :meth:`schema` resolved) also one that keeps the answers
        (:func:`~dspark_json.load.check_user_schema`)."""
        from dspark_json.response.convert import check_supported

        check_supported(schema)
        if schema != self.__dict__.get("_resolved_schema"):
            from dspark_json.load import check_user_schema

            check_user_schema(self.query, schema, lambda: _prompt_columns(self.query.options))


class PromptBatchReader(DataSourceReader):
    """``spark.read``: every prompt visible when the query is planned."""

    def __init__(self, query: Query, schema: StructType, slots: int | None = None) -> None:
        self.query = query
        self.schema = schema
        self.slots = slots

    def partitions(self) -> Sequence[InputPartition]:
        listing = _listing(self.query.options)
        segments = listing.segments(Position(), listing.end())
        size = partition_size(
            row_count(segments), given=self.query.options.input.partition_size, slots=self.slots
        )
        # Spark reads one partition of its own when given none; make that one ours (empty).
        return _plan(segments, self.query.options, listing, size) or [PromptPartition(0, ())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from dspark_json.pipeline import read_partition

        assert isinstance(partition, PromptPartition)
        return read_partition(partition, self.query, self.schema)


class PromptStreamReader(DataSourceStreamReader, AvailableNowTrigger):
    """``spark.readStream``: offsets are (file, row) positions in the prompt directory.

    The directory is listed once per micro-batch: by ``latestOffset``, whose listing serves the
    ``reportLatestOffset`` and ``partitions`` calls of the same batch. Its micro-batch ids are
    counted in the offsets (:data:`BATCHES`), which Spark checkpoints: a restarted reader, or a
    replayed batch, gets the same ids, whatever other output the query has.
    """

    def __init__(self, query: Query, schema: StructType, slots: int | None = None) -> None:
        self.query = query
        self.inputs = query.options.input
        self.schema = schema
        self.slots = slots
        self._listing = _BatchListing(
            self.inputs.location,
            storage=query.options.storage.settings,
            option=_option(query.options),
        )
        self._cap: Position | None = None
        #: Where the next micro-batch starts: the end of the last one planned, as a position and
        #: as its offset (with its batch count). Spark 4.0 and 4.1 pass no start to
        #: ``latestOffset``; after a restart they plan an empty range at the checkpoint's last.
        self._next = Position()
        self._next_offset: dict[str, object] = self.initialOffset()
        self._listed_for_next = False  # prepareForTriggerAvailableNow's listing is the first one
        #: The batches whose line is not logged yet, by id.
        #: Batches planned, not yet reported: their end, label and partition numbers.
        self._unreported: dict[int, tuple[Position, str, tuple[int, ...]]] = {}
        #: How many times each unreported batch's records were looked for and none found.
        self._looked: dict[int, int] = {}
        journal = self.inputs.journal
        self._journal = (
            Journal(journal, storage=query.options.storage.settings)
            if journal is not None
            else None
        )
        self._started = False
        #: This run (this reader's): its first micro-batch, when it started, its records so
        #: far (for the whole-run line at stop), for the progress records.
        self._run: dict[str, object] | None = None
        self._run_records: list[dict[str, object]] = []
        #: The records of the last WIDTH_SPAN_S seconds, as written: the pool's width and the
        #: minute's tokens for the next micro-batch (:func:`_carried`).
        self._recent: list[dict[str, object]] = []
        self._run_batches = 0  # the batches reported in the records above

    def initialOffset(self) -> dict[str, object]:
        return Position().to_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit(
            self.inputs.max_records_per_trigger, self.inputs.max_files_per_trigger
        )

    def latestOffset(
        self, start: dict[str, object] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, object]:
        """The end of the next micro-batch. Spark 4.2 and later pass ``start`` and ``limit``;
        4.0 and 4.1 pass neither: the batch starts where the last one ended, capped by options
        ``maxRecordsPerTrigger`` / ``maxFilesPerTrigger`` (:func:`~dspark_json.compat.read_caps`).
        """
        if not self._started:
            self._started = True
            self._say_what_is_missing()
        # Spark plans the next batch only once the last one ran: its records are all written.
        self._report(sorted(self._unreported))
        first = dict(start) if start is not None else self._next_offset
        begin = Position.from_offset(first)
        max_rows, max_files = read_caps(
            limit,
            max_rows=self.inputs.max_records_per_trigger,
            max_files=self.inputs.max_files_per_trigger,
        )
        if not self._listed_for_next:
            self._listing.refresh()
        self._listed_for_next = False
        end = self._listing.advance(begin, max_rows=max_rows, max_files=max_files, cap=self._cap)
        if end == begin:  # nothing new: the same offset, so that Spark runs no batch
            return first
        offset: dict[str, object] = {**end.to_offset(), BATCHES: _batches(first) + 1}
        if self.inputs.partition_size is None:  # the planner's choice, kept for a replay
            rows = row_count(self._listing.segments(begin, end))
            offset[PARTITION_SIZE] = partition_size(rows, given=None, slots=self.slots)
        return offset

    def _say_what_is_missing(self) -> None:
        """Once per query run: here, not in ``__init__``, because Spark builds the stream
        reader in two processes (planning, and the one that drives the micro-batches) and only
        the second calls ``latestOffset``."""
        if self._journal is None and self.inputs.responses is None:
            logger.warning(
                "Streaming without option 'journal': a micro-batch that Spark replays after a "
                "crash, or a task it retries, sends its prompts to the model again (new answers, "
                "tokens paid twice). Set option 'journal' to a directory to read them back instead."
            )
        rows = self.query.options.rows
        if rows.prometheus_port is not None and rows.metrics is not None:
            from dspark_json.prometheus import serve

            serve(rows.prometheus_port, rows.metrics, storage=self.query.options.storage.settings)
        if self.query.options.rows.metrics is None:
            driver_logger().info(
                "No line per micro-batch: set option 'metrics' to a directory to get one here "
                "(rows by status, errors, requests, tokens, latency) from what the tasks report."
            )

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow (Spark 4.2 and later): read up to what is there now."""
        self._listing.refresh()
        self._cap = self._listing.end()
        self._listed_for_next = True

    def reportLatestOffset(self) -> dict[str, object] | None:
        return self._listing.end().to_offset()

    def partitions(
        self, start: dict[str, object], end: dict[str, object]
    ) -> Sequence[InputPartition]:
        first, last = Position.from_offset(start), Position.from_offset(end)
        if last > self._next or (
            last == self._next and _batches(end) > _batches(self._next_offset)
        ):
            self._next, self._next_offset = last, dict(end)
        if last <= first:
            return []
        if not self._listing.covers(last):  # a batch run again after a restart
            self._listing.refresh()
        segments = self._listing.segments(first, last)
        batch_id = _batches(start)  # the batches before this one
        batch = batch_label(batch_id, end)
        size = partition_size(
            row_count(segments),
            given=self.inputs.partition_size or _kept_size(end),
            slots=self.slots,
        )
        planned = [
            replace(p, batch=batch)
            for p in _plan(segments, self.query.options, self._listing, size)
        ]
        numbers = tuple(unit.index for p in planned for unit in (p.parts or (p,)))
        self._unreported[batch_id] = (last, batch, numbers)
        planned = _carried(planned, self._recent, self.query.options)
        self._progress(batch_id, first, planned)
        return planned

    def _progress(self, batch_id: int, first: Position, planned: list[PromptPartition]) -> None:
        """Option metrics: the batch's prompts, and the run's (for availableNow: every prompt
        up to the end seen at its start), for the live progress."""
        metrics = self.query.options.rows.metrics
        if metrics is None:
            return
        storage = self.query.options.storage.settings
        write_batch(
            metrics,
            storage=storage,
            batch=batch_id,
            prompts=sum(p.rows for p in planned),
            partitions=len(planned),
        )
        if self._run is None:
            total = None
            if self._cap is not None:
                total = row_count(self._listing.segments(first, self._cap))
            self._run = {
                "first_batch": batch_id,
                "started": time.time(),
                "prompts": total,
                "trigger": "availableNow" if self._cap is not None else "stream",
            }
            self._write_run()
        compact(
            metrics, storage=storage, batch=batch_id, first_batch=int(str(self._run["first_batch"]))
        )

    def _write_run(self, ended: float | None = None) -> None:
        metrics, run = self.query.options.rows.metrics, self._run
        if metrics is None or run is None:
            return
        write_run(
            metrics,
            storage=self.query.options.storage.settings,
            first_batch=int(str(run["first_batch"])),
            started=float(str(run["started"])),
            prompts=None if run["prompts"] is None else int(str(run["prompts"])),
            trigger=str(run["trigger"]),
            ended=ended,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from dspark_json.pipeline import read_partition

        assert isinstance(partition, PromptPartition)
        return read_partition(partition, self.query, self.schema)

    def commit(self, end: dict[str, object]) -> None:
        """The sink has committed up to ``end``: the journal's entries before it can go. Spark
        calls this late (and not for the last batch before a shutdown); nothing relies on it."""
        if self._journal is not None:
            self._journal.prune(Position.from_offset(end))
        done = Position.from_offset(end)
        self._report(sorted(i for i, (last, *_) in self._unreported.items() if last <= done))

    def stop(self) -> None:
        """The query stops: batches not reported yet get their line now (where Spark lets this
        process finish; the next ``latestOffset`` call reports them otherwise)."""
        self._report(sorted(self._unreported), final=True)
        if self._run_records:  # the whole-run line, a run of one batch too
            batches = self._run_batches
            driver_logger().info("%s", summary(self._run_records, f"run of {batches} batch(es)"))
        self._write_run(ended=time.time())

    def _report(self, batch_ids: list[int], *, final: bool = False) -> None:
        """One line per finished micro-batch, from the records its tasks wrote. A batch none of
        whose records is found yet stays unreported, to be looked for at the next call (up to
        :data:`_LOOKS` times, and at ``stop``): it was dropped at the first look, so a line
        whose records landed late was never logged."""
        metrics = self.query.options.rows.metrics
        for batch_id in batch_ids:
            _, label, numbers = self._unreported[batch_id]
            mine = (
                read_records(
                    metrics,
                    storage=self.query.options.storage.settings,
                    batch=label,
                    partitions=numbers,
                )
                if metrics is not None
                else []
            )
            looked = self._looked.get(batch_id, 0) + 1
            if metrics is not None and not mine and not final and looked < _LOOKS:
                self._looked[batch_id] = looked
                continue
            del self._unreported[batch_id]
            self._looked.pop(batch_id, None)
            if mine:
                driver_logger().info("%s", summary(mine, f"batch {batch_id}"))
                self._run_records.extend(mine)
                self._recent = _still_recent([*self._recent, *mine], time.time())
                self._run_batches += 1
                if len(self._run_records) > _FOLD_PAST:  # a long run, in bounded memory
                    self._run_records = [fold_records(self._run_records)]
            elif metrics is not None:
                logger.warning(
                    "batch %d: no metrics record of it in %s (looked %d times); its line is "
                    "not logged. Check option 'metrics' and the tasks' logs.",
                    batch_id,
                    metrics,
                    looked,
                )


#: How many times the driver looks for a micro-batch's metrics records before it logs that
#: there are none (each look is at a call Spark makes anyway: the next batch's planning, commit).
_LOOKS = 3


def _kept_size(end: Mapping[str, object]) -> int:
    """The prompts per task the micro-batch ending at ``end`` was planned with where option
    partitionSize leaves them to the planner: the size its offset keeps; an offset without one
    was written by a version whose default was a fixed :data:`MIN_PARTITION_SIZE` (a checkpoint
    from before the planner chose): a replay cuts it the same way and finds its journal entries."""
    kept = end.get(PARTITION_SIZE)
    return kept if isinstance(kept, int) and kept > 0 else MIN_PARTITION_SIZE


def _plan(
    segments: Sequence[Segment], options: Options, listing: PromptListing, size: int
) -> list[PromptPartition]:
    """A micro-batch's partitions of ``size`` prompts (:func:`partition_size`; a batch
    read's: the whole read), each with its even share of
    option maxTokensPerMinute where given, and its share of
    option repairTokenBudget where re-asks have one: in proportion to its rows, so that the
    batch's tasks together spend at most the budget. A compressed file's ``parts`` each run
    their re-asks on their own: each gets a share of its own."""
    partitions = plan_partitions(segments, size, listing.locate)
    per_minute = options.http.max_tokens_per_minute
    if per_minute is not None and partitions:  # the tasks' even shares (http.tokens)
        share = max(1, per_minute // len(partitions))
        partitions = [replace(p, tokens_per_minute=share) for p in partitions]
        warn_small_share(per_minute, len(partitions), options.request.max_tokens)
    budget = options.repair.repair_token_budget
    if budget is None or not options.repair.repair_attempts:
        return partitions
    from dspark_json.reask.plan import share_budget

    tasks = [unit for p in partitions for unit in (p.parts or (p,))]
    shares = iter(share_budget(budget, [unit.rows for unit in tasks]))
    planned = []
    for p in partitions:
        if p.parts:
            parts = tuple(replace(part, repair_token_budget=next(shares)) for part in p.parts)
            total = sum(part.repair_token_budget or 0 for part in parts)
            planned.append(replace(p, parts=parts, repair_token_budget=total))
        else:
            planned.append(replace(p, repair_token_budget=next(shares)))
    return planned


_SHARES_WARNED: set[tuple[int, int]] = set()

#: How far back the driver looks at the last micro-batches' records for the pool's width
#: (seconds, wall clock): long enough to span a few batches, short enough to follow a cluster
#: that shrinks.
WIDTH_SPAN_S = 600.0
#: Slices a task's spend of tokens is spread over, between its start and its end.
_SLICES = 6


def _window(record: Mapping[str, object]) -> tuple[float, float] | None:
    """When a task sent its requests (wall clock): from its HTTP and parse time before ``at``,
    to ``at`` (its record's writing); ``None`` where the record does not say."""
    try:
        end = datetime.fromisoformat(str(record["at"])).timestamp()
        took = float(str(record.get("http_seconds") or 0)) + float(
            str(record.get("parse_seconds") or 0)
        )
    except (KeyError, ValueError):
        return None
    return end - max(took, 0.0), end


def pool_width(
    records: Sequence[Mapping[str, object]], partitions: int, now: float
) -> tuple[int, int] | None:
    """(machines, tasks at once) for a micro-batch of ``partitions`` tasks, from the records
    of the stream's last micro-batches (those written in the last :data:`WIDTH_SPAN_S`): the
    machines that ran them, and the most tasks that ran at once in one batch, at most
    ``partitions``; ``None`` where no record says (the first micro-batch). The gate's count of
    the tasks that split a reading's room (:func:`dspark_json.http.gauges.across`): this
    machine's times the machines, at most the tasks at once. It is learnt, not asked of Spark:
    a data source's planning runs in a Python worker without a SparkContext (and Spark Connect
    has none), and the tasks that really ran are what the room is shared by."""
    machines: set[str] = set()
    spans: dict[object, list[tuple[float, float]]] = {}
    for record in records:
        window = _window(record)
        if window is None or window[1] < now - WIDTH_SPAN_S:
            continue
        if record.get("machine"):
            machines.add(str(record["machine"]))
        spans.setdefault(record.get("batch"), []).append(window)
    if not machines or not spans:
        return None
    most = 1
    for windows in spans.values():  # the most windows open at once, per batch
        edges = sorted([(a, 1) for a, _ in windows] + [(b, -1) for _, b in windows])
        running = 0
        for _, step in edges:
            running += step
            most = max(most, running)
    return len(machines), max(1, min(partitions, most))


def _still_recent(records: Sequence[dict[str, object]], now: float) -> list[dict[str, object]]:
    """The records whose task ended within the last :data:`WIDTH_SPAN_S` seconds (those
    :func:`pool_width` and :func:`tokens_spent` read)."""
    kept = []
    for record in records:
        window = _window(record)
        if window is not None and window[1] >= now - WIDTH_SPAN_S:
            kept.append(record)
    return kept


def tokens_spent(records: Sequence[Mapping[str, object]], now: float) -> list[tuple[float, int]]:
    """What the stream's last micro-batches spent within the minute before ``now``, as (wall
    time, tokens): each task's tokens (its first answers' and its re-asks') spread evenly over
    its window (:data:`_SLICES` slices), the slices still in the minute kept (option
    maxTokensPerMinute: the minute goes on across micro-batches)."""
    slices: dict[float, int] = {}
    for record in records:
        window = _window(record)
        if window is None or window[1] <= now - 60.0:
            continue
        repair = record.get("repair")
        tokens = sum(
            int(str(record.get(name) or 0)) for name in ("prompt_tokens", "completion_tokens")
        ) + (int(str(repair.get("spent_tokens") or 0)) if isinstance(repair, Mapping) else 0)
        start, end = window
        for i in range(1, _SLICES + 1):
            at = start + (end - start) * i / _SLICES
            if at > now - 60.0:
                slices[at] = slices.get(at, 0) + tokens // _SLICES
    return sorted(slices.items())


def _carried(
    planned: list[PromptPartition], records: Sequence[Mapping[str, object]], options: Options
) -> list[PromptPartition]:
    """A micro-batch's partitions told what the stream's last micro-batches left (from their
    metrics records: option metrics): the pool's width (option maxServerQueue) and each task's
    even share of the minute's tokens spent (option maxTokensPerMinute)."""
    if not planned or not records:
        return planned
    now = time.time()
    width = None
    if options.http.max_server_queue is not None:
        width = pool_width(records, len(planned), now)
    spent: tuple[tuple[float, int], ...] = ()
    if options.http.max_tokens_per_minute is not None:
        n = len(planned)
        spent = tuple((at, tokens // n) for at, tokens in tokens_spent(records, now) if tokens >= n)
    if width is None and not spent:
        return planned
    return [replace(p, pool_width=width, tokens_spent=spent) for p in planned]


def warn_small_share(per_minute: int, tasks: int, max_tokens: int | None) -> None:
    """A WARN (once per budget and number of tasks) where option maxTokensPerMinute shared by
    ``tasks`` leaves each less than one request's completion tokens: a task still sends one
    request at a time (one alone over its share goes once nothing else is counted, so that
    it cannot wait forever), so the tasks together may pass the budget by up to that many
    requests a minute."""
    from dspark_json.http.tokens import COMPLETION_ESTIMATE  # asyncio: not in planning workers

    completion = max_tokens if max_tokens is not None else COMPLETION_ESTIMATE
    share = per_minute // tasks
    if share >= completion or (per_minute, tasks) in _SHARES_WARNED:
        return
    _SHARES_WARNED.add((per_minute, tasks))
    logger.warning(
        "Option maxTokensPerMinute=%d shared by the %d tasks of a micro-batch is %d tokens a "
        "minute each, less than one request (%d completion tokens, %s): each task still sends "
        "one request at a time, so together they may send up to %d requests a minute, past the "
        "budget. Use fewer, larger partitions (option partitionSize, or fewer rows a batch), "
        "or a lower maxTokens.",
        per_minute,
        tasks,
        share,
        completion,
        "option maxTokens" if max_tokens is not None else "the estimate without maxTokens",
        tasks,
    )


def _option(options: Options) -> str:
    """The option that names the input directory, for messages."""
    return "responses" if options.input.responses is not None else "prompts"


def _workers_start(query: Query) -> None:
    """The first phase line: what the first seconds of the first (micro-)batch are spent on."""
    phase(
        ("workers", query.id),
        "Python workers starting: Spark starts one for each task of the first batch and "
        "imports pyspark and dspark-json there before any prompt is sent (often 10-40 s; "
        "later batches reuse them).",
    )


def _warn_unredacted(options: Mapping[str, str]) -> None:
    """One WARN (once per query: its settled :attr:`DSparkJsonDataSource.query`) where the format
    was registered without ``register(spark)`` and an option holds a secret that Spark then
    shows in plans (``explain()``, the UI)."""
    secret = sorted(
        key
        for key, value in options.items()
        if re.search(REDACTION_PATTERN, key) or re.search(REDACTION_PATTERN, str(value))
    )
    if secret:
        logger.warning(
            "Option(s) %s hold a secret, and format %r was registered by Spark itself, not by "
            "dspark_json.register(spark): Spark shows their values in plans (explain(), the "
            "UI). Call dspark_json.register(spark) once per session to redact them, or pass "
            "the key with option 'apiKeyEnv' (an environment variable's name) instead.",
            ", ".join(secret),
            FORMAT,
        )


def _prompt_columns(options: Options) -> list[str] | None:
    """The columns the prompt lines' fields pass through as, from a sample (none: recorded
    answers); ``None`` where no prompt line is there yet."""
    from dspark_json.inputs.prompts import infer_passthrough

    if options.input.responses is not None:
        return []
    listing = _listing(options)
    if next(iter(listing.sample(1)), None) is None:
        return None
    return [f.name for f in infer_passthrough(listing)]


def _listing(options: Options) -> PromptListing:
    return PromptListing(
        options.input.location, storage=options.storage.settings, option=_option(options)
    )


class _BatchListing(PromptListing):
    """The input directory as one micro-batch sees it: listed again only after :meth:`refresh`.

    Spark asks for a batch's latest offset, its reported latest offset and its partitions in
    turn (files are immutable once visible), so one listing serves all three.
    """

    def __init__(
        self, directory: str, *, storage: StorageSettings = ENVIRONMENT_ONLY, option: str
    ) -> None:
        super().__init__(directory, storage=storage, option=option)
        self._snapshot: list[FileEntry] | None = None

    def refresh(self) -> None:
        """List the directory again at the next use."""
        self._snapshot = None

    def _list(self) -> list[FileEntry]:
        if self._snapshot is None:
            self._snapshot = super()._list()
        return self._snapshot

    def covers(self, end: Position) -> bool:
        """Whether the listing at hand reaches ``end``, so a batch up to it can be planned."""
        if self._snapshot is None:
            return False
        return any(e.name == end.file and self.rows(e) >= end.row for e in self._snapshot)


def session_slots(spark: SparkSession) -> int | None:
    """The task slots of ``spark``'s cluster, where its settings say: Spark's
    ``spark.default.parallelism`` where set; with a local master, the session's default
    parallelism (``local[N]``: N); a cluster of ``spark.executor.instances`` executors of
    ``spark.executor.cores`` without dynamic allocation: their product. ``None`` otherwise (a
    cluster that grows and shrinks, or whose executors are not up yet when the format is
    registered: the planner then keeps :data:`~dspark_json.inputs.listing.MIN_PARTITION_SIZE`)."""

    def conf(key: str) -> str | None:
        try:
            value = spark.conf.get(key, None)
        except Exception:  # a conf Spark Connect does not answer: not known
            return None
        return None if value is None else str(value)

    def count(text: str | None) -> int | None:
        return int(text) if text is not None and text.strip().isdigit() else None

    slots = count(conf("spark.default.parallelism"))
    if slots is not None:
        return slots or None
    master = conf("spark.master") or ""
    local = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if local is not None:
        if local.group(1) and local.group(1).isdigit():
            return int(local.group(1)) or None
        try:  # local, local[*]: the session knows (a classic one; Spark Connect: not known)
            return int(spark.sparkContext.defaultParallelism) or None
        except Exception:  # Spark Connect: no SparkContext
            return 1 if not local.group(1) else None
    if (conf("spark.dynamicAllocation.enabled") or "false").strip().lower() == "true":
        return None
    executors, cores = count(conf("spark.executor.instances")), count(conf("spark.executor.cores"))
    return executors * cores if executors and cores else None


def with_slots(source: type[DSparkJsonDataSource], slots: int | None) -> type[DSparkJsonDataSource]:
    """``source`` told the cluster's task slots (:attr:`DSparkJsonDataSource.task_slots`): a
    subclass made here, under the same name. The data source's planning runs in Python workers
    without a SparkContext (Spark Connect has none at all); Spark's registration pickles the
    class it is given, and pickles a class that no module holds under its name with its
    attributes (cloudpickle), so the slots reach every worker that plans a read."""
    if slots is None:
        return source
    attributes = {"task_slots": slots, "__module__": source.__module__, "__doc__": source.__doc__}
    made = type(source.__name__, (source,), attributes)
    made.__qualname__ = source.__qualname__
    return made
