"""The records that pass between stages, defined once, with no behaviour and no heavy imports.

    inputs ──PromptRecord──▶ http ──Outcome / Fetched (with ClientStats)──▶ parse ──Answers──▶
    pipeline (assemble, mode) ──▶ metrics

Keyword-only and frozen: a record is built in one place and read everywhere else. After the
requests, a partition's rows travel by column (:class:`PromptRows`, :class:`Outcomes`): the
parser and the assembly read them without a Python object per row, and recorded answers never
make one.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, overload

from dspark_json.rows import Attempt, RowError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "Answers",
    "ClientStats",
    "Fetched",
    "Outcome",
    "Outcomes",
    "PromptRecord",
    "PromptRows",
    "RepairStats",
    "Watch",
    "watch",
    "watching",
]


@dataclass(frozen=True, kw_only=True)
class PromptRecord:
    """One input row: the chat messages to send, or why the row cannot be sent."""

    custom_id: str | None
    messages: list[Any] | None
    fields: dict[str, Any]  # prompt fields passed through as columns
    raw: str  # the line as read, for _corrupt_record
    where: str  # "<file> row <n>", for messages
    problem: str | None = None  # why it cannot be sent (the row is invalid_prompt)
    #: Request fields of its own (a row in the OpenAI batch input format); they win.
    overrides: dict[str, Any] | None = None

    def describe(self) -> str:
        """How to point a user at this row: its custom_id, else its file and row number."""
        return f"custom_id {self.custom_id!r} ({self.where})" if self.custom_id else self.where


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """The result of one request: a response body, or the ``_error`` that stopped it (neither:
    never sent, as after a FAILFAST stop)."""

    body: str | None = None
    error: RowError | None = None


class PromptRows:
    """A partition's input rows by column, as the pipeline reads them once the requests are made.

    Parameters
    ----------
    custom_ids:
        Each row's ``custom_id`` (``None`` where it has none).
    fields:
        Each row's prompt fields passed through as columns; ``None``: no row has any.
    problems:
        Row -> why it could not be sent (the row is ``invalid_prompt``); most rows have none.
    record:
        Row -> its :class:`PromptRecord`, built on demand (to name the row in a message).
    """

    def __init__(
        self,
        custom_ids: Sequence[str | None],
        *,
        fields: Sequence[dict[str, Any]] | None,
        problems: Mapping[int, str],
        record: Callable[[int], PromptRecord],
    ) -> None:
        self.custom_ids = custom_ids
        self.fields = fields
        self.problems = problems
        self.record = record

    @classmethod
    def of(cls, records: Sequence[PromptRecord]) -> PromptRows:
        """The columns of ``records``."""
        problems = {i: r.problem for i, r in enumerate(records) if r.problem is not None}
        return cls(
            [r.custom_id for r in records],
            fields=[r.fields for r in records] if any(r.fields for r in records) else None,
            problems=problems,
            record=records.__getitem__,
        )

    def __len__(self) -> int:
        return len(self.custom_ids)

    def describe(self, row: int) -> str:
        """How to point a user at ``row`` (:meth:`PromptRecord.describe`)."""
        return self.record(row).describe()


class Outcomes(Sequence[Outcome]):
    """The outcomes of a partition's requests by column: the bodies as one Arrow string array
    (null where there is none) and the errors by row (most rows have none).

    A sequence of :class:`Outcome` all the same, built on demand.
    """

    def __init__(self, bodies: pa.Array, errors: Mapping[int, RowError] | None = None) -> None:
        self.bodies = bodies
        self.errors: Mapping[int, RowError] = errors or {}

    @classmethod
    def of(cls, outcomes: Sequence[Outcome]) -> Outcomes:
        """The columns of ``outcomes``."""
        import pyarrow as pa

        errors = {i: o.error for i, o in enumerate(outcomes) if o.error is not None}
        return cls(pa.array([o.body for o in outcomes], pa.large_string()), errors)

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, row: int) -> Outcome: ...
    @overload
    def __getitem__(self, row: slice) -> list[Outcome]: ...
    def __getitem__(self, row: int | slice) -> Outcome | list[Outcome]:
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        if not -len(self) <= row < len(self):
            raise IndexError(row)
        row %= len(self)
        return Outcome(body=self.bodies[row].as_py(), error=self.errors.get(row))

    def __iter__(self) -> Iterator[Outcome]:
        bodies = self.bodies.to_pylist()
        return (Outcome(body=b, error=self.errors.get(i)) for i, b in enumerate(bodies))


@dataclass(frozen=True, kw_only=True)
class ClientStats:
    """What the client did for one partition (part of its metrics)."""

    requests: int = 0  # HTTP attempts sent
    retries: int = 0
    failed: int = 0  # prompts that ended with an error
    statuses: Mapping[str, int] = field(default_factory=dict)  # "200", "429", "timeout", ...
    latencies: Sequence[float] = ()  # of successful attempts, seconds
    limit_peak: int = 0
    limit_lowest: int = 0
    limit_final: int = 0
    endpoint_rests: int = 0
    #: Options dedupe and cache (:mod:`dspark_json.http.reuse`): rows answered by another
    #: row's identical request, and distinct requests found in the cache or not.
    deduplicated: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    #: Of the hits, requests another task was sending (its claim: :mod:`.http.claims`),
    #: answered once this task had waited for them.
    cache_waits: int = 0
    #: By the request's model, where the client routed by model (:mod:`dspark_json.http.replicas`):
    #: attempts sent, and the successful ones' latencies (seconds).
    model_requests: Mapping[str, int] = field(default_factory=dict)
    model_latencies: Mapping[str, Sequence[float]] = field(default_factory=dict)

    #: Option maxServerQueue: seconds new requests waited for a saturated endpoint's room
    #: (summed over requests).
    held_s: float = 0.0
    #: Answers that shed a request (:mod:`dspark_json.http.verdicts`: llm-d's 429 with
    #: x-llm-d-request-dropped-reason, a gateway's 503 with no endpoint yet): retried, not
    #: failed, never resting the endpoint.
    shed: int = 0

    def then(self, other: ClientStats) -> ClientStats:
        """The client's figures of two sends of one task, this one and then ``other``.

        Counts add up; the in-flight limit's peak and low are over both, its final value is
        ``other``'s. The reuse figures (dedupe, cache) are this one's: they are counted once,
        around the sends.
        """
        if not other.requests and not other.statuses:
            return self
        if not self.requests and not self.statuses:
            return replace(
                other,
                deduplicated=self.deduplicated,
                cache_hits=self.cache_hits,
                cache_misses=self.cache_misses,
                cache_waits=self.cache_waits,
            )
        statuses = Counter(self.statuses)
        statuses.update(other.statuses)
        models = Counter(self.model_requests)
        models.update(other.model_requests)
        latencies = {m: list(v) for m, v in self.model_latencies.items()}
        for model, values in other.model_latencies.items():
            latencies.setdefault(model, []).extend(values)
        return replace(
            self,
            requests=self.requests + other.requests,
            retries=self.retries + other.retries,
            failed=self.failed + other.failed,
            statuses=dict(statuses),
            latencies=[*self.latencies, *other.latencies],
            limit_peak=max(self.limit_peak, other.limit_peak),
            limit_lowest=min(self.limit_lowest, other.limit_lowest),
            limit_final=other.limit_final,
            endpoint_rests=self.endpoint_rests + other.endpoint_rests,
            model_requests=dict(models),
            model_latencies=latencies,
            held_s=self.held_s + other.held_s,
            shed=self.shed + other.shed,
        )

    def latency(self, q: float) -> float | None:
        """The ``q`` quantile (0-1) of the successful attempts' latency, in seconds."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True, kw_only=True)
class RepairStats:
    """What the re-asks of one partition did and cost (part of its metrics)."""

    reasks: int = 0  # re-ask requests (each a row asked again once)
    rows: int = 0  # rows asked again at least once
    fixed: int = 0  # of those, ok (and without violations) at the end
    prompt_tokens: int = 0  # the re-asks' usage, apart from the first answers'
    completion_tokens: int = 0
    budget: int | None = None  # repairTokenBudget
    over_budget: int = 0  # rows left as answered because the budget was spent
    from_journal: int = 0  # re-ask answers read back from the journal, not sent
    #: What repairTokenBudget counted: the re-asks' tokens, reported or (where an answer has
    #: no usage) estimated from its length, each answer once however many rows shared it.
    spent_tokens: int = 0
    estimated_tokens: int = 0  # of spent_tokens, the estimated ones
    #: The first and the last answers' usage of the rows asked again, so that the partition's
    #: first-answer tokens can be told from the rows' (which hold the last answers).
    first_prompt_tokens: int = 0
    first_completion_tokens: int = 0
    last_prompt_tokens: int = 0
    last_completion_tokens: int = 0
    client: ClientStats = field(default_factory=ClientStats)


@dataclass(frozen=True, kw_only=True)
class Fetched:
    """The outcomes of a list of requests, in order, and what it took."""

    outcomes: Outcomes
    stats: ClientStats = field(default_factory=ClientStats)


@dataclass(frozen=True, kw_only=True)
class Answers:
    """The responses to a list of prompts, parsed, with what happened to each row."""

    responses: pa.Table  # the response columns (and _status) of the target schema
    outcomes: Outcomes
    statuses: list[str]
    stats: ClientStats
    backend: str
    http_seconds: float
    parse_seconds: float
    reference_rows: int
    #: Those rows by reason (:class:`~dspark_json.parse.parser.Reason`'s words).
    reference_reasons: dict[str, int] = field(default_factory=dict)
    violations: list[list[str] | None] | None = None  # with option validateSchema
    source: str = "server"  # where the answers came from: server, journal, recorded
    #: With option repairAttempts: each re-asked row's attempts (``_attempts``), and their cost.
    attempts: Mapping[int, list[Attempt]] | None = None
    repair: RepairStats | None = None
    #: The rows of ``_status`` schema_mismatch -> the value that did not fit its field.
    misfits: Mapping[int, str] = field(default_factory=dict)


class Watch:
    """What a task's live progress (:mod:`dspark_json.progress`) reads while its requests run:
    the client's runs of the task (each holds its tally, gate and in-flight limits), read from
    the progress thread every few seconds, never copied per row."""

    def __init__(self) -> None:
        self.runs: list[Any] = []


_WATCHED = threading.local()


def watching(found: Watch | None) -> None:
    """Set (or, with ``None``, clear) the watch of the calling thread's task."""
    _WATCHED.watch = found


def watch(run: Any) -> bool:
    """Register a client run with the calling thread's watch; ``False`` where its task has
    none (nothing reads the run's live counts)."""
    found: Watch | None = getattr(_WATCHED, "watch", None)
    if found is not None:
        found.runs.append(run)
    return found is not None
