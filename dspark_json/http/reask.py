"""Re-asking what the model got wrong (option ``repairAttempts``): the rounds.

After the first answers are parsed, the rows :mod:`.repair` calls wrong are asked again, up to
``repairAttempts`` rounds. A re-ask is not a transport retry (:mod:`.retry`): each re-ask is a
new request with its own ``maxAttempts``, and neither counts against the other. When the
attempts run out, or the task's share of its micro-batch's re-ask budget (``repairTokenBudget``,
shared out at planning) is spent, the last answer is the row.

Every round's answers go to a :class:`RoundStore` (the journal) before the next round and
before any row leaves, so that a replay asks the model nothing it already answered: the same
first answers give the same rows to re-ask, and each round is read back instead of sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from dspark_json.http.client import complete_all
from dspark_json.http.options import HttpOptions
from dspark_json.http.repair import (
    REASKED,
    Answer,
    RepairOptions,
    RowState,
    is_wrong,
    plan,
    read_answer,
    shorten,
    whole_number,
)
from dspark_json.http.request_body import RequestBuilder
from dspark_json.records import (
    ClientStats,
    Fetched,
    Outcome,
    Outcomes,
    PromptRecord,
    RepairStats,
)
from dspark_json.rows import Attempt, Status, status_of_error

__all__ = ["Judged", "Repaired", "RoundStore", "repair"]

logger = logging.getLogger("dspark_json")


@dataclass(frozen=True, kw_only=True)
class Judged:
    """What the parser and the validator said of some answers: each row's status, and its
    schema violations (``None``: not validated)."""

    statuses: list[str]
    violations: list[list[str] | None] | None = None


@dataclass(frozen=True, kw_only=True)
class Repaired:
    """The answers after the re-asks: every row's last answer, the attempts of the rows that
    needed one (by row), and what it cost."""

    outcomes: Outcomes
    attempts: Mapping[int, list[Attempt]]
    stats: RepairStats


class RoundStore(Protocol):
    """Where each round's answers are kept (the journal): read back on a replay."""

    def load(self, round: int) -> tuple[list[int], Outcomes] | None: ...

    def save(self, round: int, rows: list[int], outcomes: Outcomes) -> None: ...


def repair(
    records: Callable[[int], PromptRecord],
    first: Outcomes,
    judged: Judged,
    *,
    options: RepairOptions,
    builder: RequestBuilder,
    http: HttpOptions,
    judge: Callable[[Outcomes], Judged],
    store: RoundStore | None = None,
    send: Callable[[list[bytes]], Fetched] | None = None,
    context: int | None = None,
) -> Repaired:
    """Re-ask the rows ``judged`` finds wrong, up to ``repairAttempts`` rounds.

    Parameters
    ----------
    records:
        Row -> its prompt record (to build its request again).
    first:
        The first answers, one per row.
    judged:
        Their statuses and violations.
    options:
        The repair options.
    builder:
        Builds each row's first request (the re-ask starts from it).
    http:
        How to send (the re-asks have the transport's retries, maxAttempts each).
    judge:
        The statuses and violations of a round's answers (the same parser and validator as the
        first answers').
    store:
        Where each round's answers are journaled and read back on a replay.
    send:
        Sends request bodies (default :func:`~dspark_json.http.client.complete_all`).
    context:
        The model's context length, where known: a truncated answer's re-ask asks for at most
        what is left of it after the prompt.
    """
    sender = send or (lambda bodies: complete_all(bodies, http))
    rows = _wrong_rows(records, first, judged, builder)
    budget = _Budget(options.repair_token_budget)
    reasks = replayed = 0
    client: list[ClientStats] = []
    for round in range(1, options.repair_attempts + 1):
        asked, bodies, raised = _round(rows, options, budget, context)
        if not asked:
            break
        recorded = store.load(round) if store is not None else None
        if recorded is not None and recorded[0] == asked:
            outcomes = recorded[1]
            replayed += len(asked)
        else:
            fetched = sender(bodies)
            outcomes = fetched.outcomes
            client.append(fetched.stats)
            if store is not None:
                store.save(round, asked, outcomes)
        reasks += len(asked)
        verdict = judge(outcomes)
        for k, i in enumerate(asked):
            budget.spent += _take(rows[i], outcomes[k], verdict, k, raised[k])
    for row in rows.values():
        if is_wrong(row) and not row.done:
            _note(row, f"not re-asked: repairAttempts={options.repair_attempts} used up")
    final = first
    asked_rows = [row for row in rows.values() if len(row.attempts) > 1]
    if asked_rows:
        bodies_now = first.bodies.to_pylist()
        for i, row in rows.items():
            bodies_now[i] = row.body
        final = Outcomes(pa.array(bodies_now, pa.large_string()), first.errors)
    stats = _stats(asked_rows, reasks=reasks, replayed=replayed, budget=budget, client=client)
    if reasks:
        logger.info(
            "re-asked %d row(s) %d time(s) (%d read back from the journal): %d fixed, %d over "
            "budget; %d prompt + %d completion tokens",
            stats.rows,
            reasks,
            replayed,
            stats.fixed,
            stats.over_budget,
            stats.prompt_tokens,
            stats.completion_tokens,
        )
    return Repaired(outcomes=final, attempts={i: r.attempts for i, r in rows.items()}, stats=stats)


@dataclass
class _Budget:
    """Option repairTokenBudget, this task's share of it: the tokens its re-asks may spend, and
    have spent."""

    limit: int | None
    spent: int = 0
    refused: int = 0  # rows not re-asked because of it


def _wrong_rows(
    records: Callable[[int], PromptRecord],
    first: Outcomes,
    judged: Judged,
    builder: RequestBuilder,
) -> dict[int, RowState]:
    """The rows whose first answer a re-ask could fix, with their first request."""
    violations = judged.violations
    rows: dict[int, RowState] = {}
    for i, status in enumerate(judged.statuses):
        if status not in REASKED and not (status == Status.OK and violations and violations[i]):
            continue
        body = first.bodies[i].as_py()
        request = json.loads(builder.build(records(i)))
        rows[i] = RowState(
            request=request,
            messages=list(request["messages"]),
            max_tokens=whole_number(request.get("max_tokens")),
            body=body,
            status=status,
            violations=violations[i] if violations is not None else None,
            attempts=[_attempt(status, read_answer(body))],
        )
    return rows


def _round(
    rows: Mapping[int, RowState], options: RepairOptions, budget: _Budget, context: int | None
) -> tuple[list[int], list[bytes], list[int | None]]:
    """The rows to re-ask in this round, their request bodies and max_tokens."""
    asked: list[int] = []
    bodies: list[bytes] = []
    raised: list[int | None] = []
    committed = budget.spent  # with the estimates of the re-asks admitted this round
    for i, row in rows.items():
        if row.done or not is_wrong(row):
            continue
        answer = read_answer(row.body)
        how = plan(row, answer, options, context)
        if isinstance(how, str):
            _note(row, how)
            continue
        estimate = 2 * ((answer.prompt_tokens or 0) + (answer.completion_tokens or 0))
        if budget.limit is not None and committed + estimate > budget.limit:
            budget.refused += 1
            _note(
                row,
                f"not re-asked: repairTokenBudget is spent (this task's share: {budget.limit} "
                f"tokens, {budget.spent} spent)",
            )
            continue
        committed += estimate
        reason, request, max_tokens = how
        _say(row, reason)
        asked.append(i)
        bodies.append(json.dumps(request, ensure_ascii=False).encode("utf-8"))
        raised.append(max_tokens)
    return asked, bodies, raised


def _take(row: RowState, outcome: Outcome, verdict: Judged, k: int, max_tokens: int | None) -> int:
    """Record the answer to a re-ask of ``row`` (``k``: its place in the round); the tokens it
    cost."""
    if outcome.error is not None:  # the re-ask failed: the row keeps its last answer
        row.attempts.append(
            Attempt(
                status=status_of_error(outcome.error),
                reason=f"{outcome.error['type']}: {shorten(outcome.error['message'], 160)}",
                prompt_tokens=None,
                completion_tokens=None,
            )
        )
        return 0
    answer = read_answer(outcome.body)
    row.body = outcome.body
    row.max_tokens = max_tokens
    row.status = verdict.statuses[k]
    row.violations = verdict.violations[k] if verdict.violations is not None else None
    row.attempts.append(_attempt(row.status, answer))
    return (answer.prompt_tokens or 0) + (answer.completion_tokens or 0)


def _stats(
    asked: Sequence[RowState],
    *,
    reasks: int,
    replayed: int,
    budget: _Budget,
    client: Sequence[ClientStats],
) -> RepairStats:
    reasked = [a for row in asked for a in row.attempts[1:]]
    return RepairStats(
        reasks=reasks,
        rows=len(asked),
        fixed=sum(1 for row in asked if not is_wrong(row)),
        prompt_tokens=sum(a["prompt_tokens"] or 0 for a in reasked),
        completion_tokens=sum(a["completion_tokens"] or 0 for a in reasked),
        budget=budget.limit,
        over_budget=budget.refused,
        from_journal=replayed,
        first_prompt_tokens=sum(r.attempts[0]["prompt_tokens"] or 0 for r in asked),
        first_completion_tokens=sum(r.attempts[0]["completion_tokens"] or 0 for r in asked),
        last_prompt_tokens=sum(_last(r, "prompt_tokens") for r in asked),
        last_completion_tokens=sum(_last(r, "completion_tokens") for r in asked),
        client=_merge(client),
    )


def _note(row: RowState, why: str) -> None:
    """The row is not asked again: say why on its last attempt."""
    row.done = True
    _say(row, why)


def _say(row: RowState, why: str) -> None:
    last = row.attempts[-1]
    last["reason"] = f"{last['reason']}; {why}" if last["reason"] else why


def _attempt(status: str, answer: Answer) -> Attempt:
    return Attempt(
        status=status,
        reason=None,
        prompt_tokens=answer.prompt_tokens,
        completion_tokens=answer.completion_tokens,
    )


def _last(row: RowState, name: str) -> int:
    """The usage of the row's last answer (an attempt that failed holds none)."""
    for attempt in reversed(row.attempts):
        if attempt["status"] != Status.HTTP_ERROR:
            value = attempt[name]  # type: ignore[literal-required]
            return int(value or 0)
    return 0


def _merge(stats: Sequence[ClientStats]) -> ClientStats:
    """The client's counts over the rounds."""
    statuses: dict[str, int] = {}
    for s in stats:
        for code, count in s.statuses.items():
            statuses[code] = statuses.get(code, 0) + count
    return ClientStats(
        requests=sum(s.requests for s in stats),
        retries=sum(s.retries for s in stats),
        failed=sum(s.failed for s in stats),
        statuses=statuses,
        latencies=tuple(x for s in stats for x in s.latencies),
    )
