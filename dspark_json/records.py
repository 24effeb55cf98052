"""The records that pass between stages, defined once, with no behaviour and no heavy imports.

    inputs ──PromptRecord──▶ http ──Outcome / Fetched (with ClientStats)──▶ parse ──Answers──▶
    pipeline (assemble, mode) ──▶ metrics

Keyword-only and frozen: a record is built in one place and read everywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dspark_json.rows import RowError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Answers", "ClientStats", "Fetched", "Outcome", "PromptRecord"]


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

    def latency(self, q: float) -> float | None:
        """The ``q`` quantile (0-1) of the successful attempts' latency, in seconds."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True, kw_only=True)
class Fetched:
    """The outcomes of a list of requests, in order, and what it took."""

    outcomes: list[Outcome]
    stats: ClientStats = field(default_factory=ClientStats)


@dataclass(frozen=True, kw_only=True)
class Answers:
    """The responses to a list of prompts, parsed, with what happened to each row."""

    responses: pa.Table  # the response columns (and _status) of the target schema
    outcomes: list[Outcome]
    statuses: list[str]
    stats: ClientStats
    backend: str
    http_seconds: float
    parse_seconds: float
    reference_rows: int
    violations: list[list[str] | None] | None = None  # with option validateSchema
    source: str = "server"  # where the answers came from: server, journal, recorded
