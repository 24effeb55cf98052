"""Re-asking what the model got wrong (option ``repairAttempts``): the rounds.

After the first answers are parsed, the rows :mod:`.plan` calls wrong are asked again, up to
``repairAttempts`` rounds. A re-ask is not a transport retry (:mod:`dspark_json.http.retry`):
each re-ask is a new request with its own ``maxAttempts``, and neither counts against the other.
When the attempts run out, or the task's share of its micro-batch's re-ask budget
(``repairTokenBudget``, shared out at planning) is spent, the last answer is the row.

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
from dspark_json.http.dedup import Dedupe, is_deterministic
from dspark_json.http.options import HttpOptions
from dspark_json.reask.options import RepairOptions
from dspark_json.reask.plan import (
    REASKED,
    RowState,
    by_length,
    is_wrong,
    plan,
    shorten,
    token_cost,
    whole_number,
)
from dspark_json.records import (
    ClientStats,
    Fetched,
    Outcome,
    Outcomes,
    PromptRecord,
    RepairStats,
)
from dspark_json.request.body import RequestBuilder
from dspark_json.response.answers import Answer, read_answers
from dspark_json.rows import Attempt, Status, status_of_error

__all__ = ["Judged", "Repaired", "RoundStore", "repair"]

logger = logging.getLogger("dspark_json")


@dataclass(frozen=True, kw_only=True)
class Judged:
    """What the parser and the validator said of some answers: the parser's table (what the
    re-asks read of each answer, :func:`~dspark_json.response.answers.read_answers`), each
    row's status, and its schema violations (``None``: not validated)."""

    parsed: pa.Table
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
    dedupe: Dedupe = "auto",
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
    dedupe:
        Option ``dedupe``: which identical re-asks of a round are sent once (as the first
        requests are, :func:`~dspark_json.http.dedup.group`), the answer shared by every row
        that asked it (each row's attempts list it; the budget pays for it once).
    """
    sender = send or (lambda bodies: complete_all(bodies, http))
    budget = _Budget(options.repair_token_budget)
    rows = _wrong_rows(records, first, judged, builder, budget)
    reasks = replayed = 0
    client: list[ClientStats] = []
    for round in range(1, options.repair_attempts + 1):
        sent = _round(rows, options, budget, context, dedupe)
        asked = sent.rows
        if not asked:
            break
        recorded = store.load(round) if store is not None else None
        if recorded is not None and recorded[0] == asked:
            outcomes = recorded[1]
            replayed += len(asked)
        else:
            fetched = sender(sent.bodies)
            outcomes = Outcomes.of([fetched.outcomes[k] for k in sent.slots])
            client.append(fetched.stats)
            if store is not None:
                store.save(round, asked, outcomes)
        reasks += len(asked)
        verdict = judge(outcomes)
        answers = read_answers(verdict.parsed, outcomes.bodies)
        charged: set[int] = set()
        for k, i in enumerate(asked):
            _take(rows[i], outcomes[k], verdict, k, sent.raised[k], answer=answers[k])
            slot = sent.slots[k]
            if slot in charged or outcomes[k].error is not None:
                continue  # a row that shares another's re-ask, or a re-ask that failed
            charged.add(slot)
            budget.spend(*token_cost(answers[k], sent.bodies[slot], outcomes[k].body))
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
            "budget; %d prompt + %d completion tokens reported, %d of the budget's %d spent "
            "estimated (answers without usage)",
            stats.rows,
            reasks,
            replayed,
            stats.fixed,
            stats.over_budget,
            stats.prompt_tokens,
            stats.completion_tokens,
            budget.estimated,
            budget.spent,
        )
    return Repaired(outcomes=final, attempts={i: r.attempts for i, r in rows.items()}, stats=stats)


@dataclass
class _Budget:
    """Option repairTokenBudget, this task's share of it: the tokens its re-asks may spend and
    have spent (reported, or estimated by :func:`~.repair.token_cost` where an answer has no
    usage), and what an answer's completion is expected to cost: the mean of this task's
    answers so far (the wrong rows' first answers and every re-ask's)."""

    limit: int | None
    spent: int = 0
    estimated: int = 0  # of spent, the tokens of answers without usage (estimated)
    refused: int = 0  # rows not re-asked because of it
    answers: int = 0
    completions: int = 0

    def see(self, completion: int) -> None:
        """One more answer, whose completion cost ``completion`` tokens."""
        self.answers += 1
        self.completions += completion

    def spend(self, prompt: int, completion: int, estimated: bool) -> None:
        """A re-ask's answer."""
        self.see(completion)
        self.spent += prompt + completion
        if estimated:
            self.estimated += prompt + completion

    def completion(self) -> int:
        """The tokens an answer's completion is expected to cost: the mean so far, rounded up."""
        return -(-self.completions // self.answers) if self.answers else 0


def _price(row: RowState, request: bytes, max_tokens: int | None, budget: _Budget) -> int:
    """What a re-ask of ``row`` with body ``request`` is expected to cost: its prompt (the
    first answer's prompt tokens plus what the re-ask adds to the first request, by length)
    and its completion (the mean completion of this task's answers; for a truncated row at
    least its raised max_tokens, which the answer is expected to need)."""
    prompt = row.prompt_tokens + by_length(max(0, len(request) - row.request_bytes))
    expected = budget.completion()
    if max_tokens is not None and row.status == Status.TRUNCATED:
        expected = max(expected, max_tokens)
    return prompt + expected


def _wrong_rows(
    records: Callable[[int], PromptRecord],
    first: Outcomes,
    judged: Judged,
    builder: RequestBuilder,
    budget: _Budget,
) -> dict[int, RowState]:
    """The rows whose first answer a re-ask could fix, with their first request (their first
    answers priced into ``budget``)."""
    violations = judged.violations
    wrong = [
        i
        for i, status in enumerate(judged.statuses)
        if status in REASKED or (status == Status.OK and violations and violations[i])
    ]
    rows: dict[int, RowState] = {}
    for i, answer in zip(wrong, read_answers(judged.parsed, first.bodies, wrong), strict=True):
        status = judged.statuses[i]
        body = first.bodies[i].as_py()
        built = builder.build(records(i))
        request = json.loads(built)
        prompt, completion, _ = token_cost(answer, built, body)
        budget.see(completion)
        rows[i] = RowState(
            request=request,
            messages=list(request["messages"]),
            max_tokens=whole_number(request.get("max_tokens")),
            body=body,
            answer=answer,
            status=status,
            violations=violations[i] if violations is not None else None,
            attempts=[_attempt(status, answer)],
            prompt_tokens=prompt,
            request_bytes=len(built),
        )
    return rows


@dataclass(frozen=True)
class _Sent:
    """One round: the rows re-asked, the distinct request bodies sent, each row's body (its
    index in ``bodies``) and max_tokens."""

    rows: list[int]
    bodies: list[bytes]
    slots: list[int]
    raised: list[int | None]


def _round(
    rows: Mapping[int, RowState],
    options: RepairOptions,
    budget: _Budget,
    context: int | None,
    dedupe: Dedupe,
) -> _Sent:
    """The rows to re-ask in this round: each while the budget's remainder pays the price of
    one more request (a row whose re-ask is identical to one already in the round shares it,
    at no price)."""
    asked: list[int] = []
    bodies: list[bytes] = []
    slots: list[int] = []
    raised: list[int | None] = []
    first: dict[bytes, int] = {}
    committed = budget.spent  # with the price of the re-asks admitted this round
    for i, row in rows.items():
        if row.done or not is_wrong(row):
            continue
        how = plan(row, row.answer, options, context)
        if isinstance(how, str):
            _note(row, how)
            continue
        reason, request, max_tokens = how
        sent = json.dumps(request, ensure_ascii=False).encode("utf-8")
        joins = dedupe == "force" or (dedupe == "auto" and is_deterministic(request))
        slot = first.get(sent) if joins else None
        if slot is None:
            price = _price(row, sent, max_tokens, budget)
            if budget.limit is not None and committed + price > budget.limit:
                budget.refused += 1
                _note(
                    row,
                    f"not re-asked: repairTokenBudget is spent (this task's share: "
                    f"{budget.limit} tokens, {budget.spent} spent, {committed - budget.spent} "
                    f"committed this round; this re-ask is priced at {price})",
                )
                continue
            committed += price
            slot = len(bodies)
            bodies.append(sent)
            if joins:
                first[sent] = slot
        _say(row, reason)
        asked.append(i)
        slots.append(slot)
        raised.append(max_tokens)
    return _Sent(rows=asked, bodies=bodies, slots=slots, raised=raised)


def _take(
    row: RowState,
    outcome: Outcome,
    verdict: Judged,
    k: int,
    max_tokens: int | None,
    *,
    answer: Answer,
) -> None:
    """Record the answer to a re-ask of ``row`` (``k``: its place in the round; ``answer``:
    what its parse says of it)."""
    if outcome.error is not None:  # the re-ask failed: the row keeps its last answer
        row.attempts.append(
            Attempt(
                status=status_of_error(outcome.error),
                reason=f"{outcome.error['type']}: {shorten(outcome.error['message'], 160)}",
                prompt_tokens=None,
                completion_tokens=None,
            )
        )
        return
    row.body = outcome.body
    row.answer = answer
    row.max_tokens = max_tokens
    row.status = verdict.statuses[k]
    row.violations = verdict.violations[k] if verdict.violations is not None else None
    row.attempts.append(_attempt(row.status, answer))


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
        spent_tokens=budget.spent,
        estimated_tokens=budget.estimated,
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
