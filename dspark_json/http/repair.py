"""Re-asking what the model got wrong (option ``repairAttempts``): the policy and the loop.

After the first answers are parsed, a row whose answer is ``truncated``, ``not_json``,
``corrupt_content`` or (with ``validateSchema``) breaks the JSON Schema is asked again, up to
``repairAttempts`` times:

- ``truncated``: the same request with ``max_tokens`` doubled (capped by ``repairMaxTokens`` and
  by what the model's context leaves after the prompt, where the server lists it);
- the others: the conversation extended with the model's answer and a user message that names
  what was wrong (the parse error, or the violations: path and message, capped in length),
  asking for the JSON only.

``http_error``, ``invalid_prompt``, ``corrupt_envelope``, ``empty`` and refusals are never
re-asked. A re-ask is not a transport retry (:mod:`.retry`): each re-ask is a new request with
its own ``maxAttempts``, and neither counts against the other. When the attempts run out, or
the task's re-ask budget (``repairTokenBudget``) is spent, the last answer is the row.

Every round's answers go to a :class:`RoundStore` (the journal) before the next round and
before any row leaves, so that a replay asks the model nothing it already answered: the same
first answers give the same rows to re-ask, and each round is read back instead of sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from dspark_json.http.client import complete_all
from dspark_json.http.options import HttpOptions
from dspark_json.http.request_body import RequestBuilder
from dspark_json.option_spec import number, option, positive
from dspark_json.parse.content import extract_json
from dspark_json.records import (
    ClientStats,
    Fetched,
    Outcome,
    Outcomes,
    PromptRecord,
    RepairStats,
)
from dspark_json.rows import Attempt, load_json

__all__ = [
    "REASKED",
    "Judged",
    "RepairOptions",
    "Repaired",
    "RoundStore",
    "feedback",
    "repair",
]

logger = logging.getLogger("dspark_json")

#: The statuses a re-ask can fix (with validateSchema: an ``ok`` row with violations too).
REASKED = frozenset({"truncated", "not_json", "corrupt_content"})
#: The longest text the re-ask message quotes of one problem, and of all of them.
_ONE_PROBLEM = 200
_ALL_PROBLEMS = 600


@dataclass(frozen=True, kw_only=True)
class RepairOptions:
    """Whether, how often and at what cost rows with a wrong answer are asked again."""

    repair_attempts: int = option(
        "repairAttempts",
        "Re-asks per row whose answer is truncated, not_json, corrupt_content or (with "
        "validateSchema) breaks the schema: truncated ones with max_tokens doubled, the others "
        "with the answer and what was wrong with it added to the conversation. 0: none (a "
        "re-ask costs tokens). Column _attempts shows each attempt; never re-asked: "
        "http_error, invalid_prompt, refusals.",
        "2",
        convert=number(int, low=0, high=10),
        default="0",
    )
    repair_max_tokens: int | None = option(
        "repairMaxTokens",
        "The most max_tokens a re-ask of a truncated answer asks for (doubling from maxTokens "
        "or the row's own). Never more than the model's context leaves after the prompt, "
        "where the server lists it (vLLM's max_model_len). Default: no other cap.",
        "2048",
        convert=positive(int),
    )
    repair_token_budget: int | None = option(
        "repairTokenBudget",
        "The most tokens (prompt + completion) the re-asks of one task of a micro-batch may "
        "spend; a re-ask is sent while the tokens spent plus its estimate (twice those of the "
        "answer it replaces) stay within it. Past it, rows stay as answered and the metrics "
        "say so (repair.over_budget). Default: no cap.",
        "200000",
        convert=positive(int),
    )


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


@dataclass
class _Row:
    """A row being repaired: its request, its answer now, its attempts."""

    request: dict[str, Any]
    messages: list[Any]  # the first request's messages
    max_tokens: int | None
    body: str | None
    status: str
    violations: list[str] | None
    attempts: list[Attempt]
    done: bool = False  # not to be asked again


@dataclass
class _Answer:
    """What the policy reads of one answer body."""

    content: str | None = None
    finish_reason: str | None = None
    refused: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def _read(body: str | None) -> _Answer:
    try:
        envelope = _object(load_json(body) if body is not None else None)
    except ValueError:  # not the answer's JSON: the parser has said so
        return _Answer()
    usage = _object(envelope.get("usage"))
    out = _Answer(
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
    )
    choices = envelope.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if isinstance(choice, dict):
        message = _object(choice.get("message"))
        content = message.get("content")
        out.content = content if isinstance(content, str) else None
        out.finish_reason = choice.get("finish_reason")
        out.refused = bool(message.get("refusal")) or out.finish_reason == "content_filter"
    return out


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_error(content: str | None) -> str:
    """What is wrong with ``content`` as JSON, short: the decoder's message and where."""
    if content is None:
        return "the answer has no content"
    found = extract_json(content)
    if found is None:
        return "the answer holds no JSON (prose)"
    try:
        json.loads(found)
    except json.JSONDecodeError as exc:
        return f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except ValueError as exc:
        return f"invalid JSON: {exc}"
    return "the JSON does not have the types asked for"


def feedback(status: str, problem: str, violations: Sequence[str] | None) -> str:
    """The user message of a conversation re-ask: what was wrong, and what to answer."""
    if violations:
        listed = "; ".join(_cut(v, _ONE_PROBLEM) for v in violations)
        return (
            "Your answer breaks the JSON Schema: "
            f"{_cut(listed, _ALL_PROBLEMS)}. Answer again with only the corrected JSON "
            "document, no prose and no Markdown."
        )
    return (
        f"Your answer could not be read ({status}: {_cut(problem, _ONE_PROBLEM)}). Answer again "
        "with only the JSON document, no prose and no Markdown."
    )


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
        if _wrong(row) and not row.done:
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
    """Option repairTokenBudget: the tokens the re-asks may spend, and have spent."""

    limit: int | None
    spent: int = 0
    refused: int = 0  # rows not re-asked because of it


def _wrong_rows(
    records: Callable[[int], PromptRecord],
    first: Outcomes,
    judged: Judged,
    builder: RequestBuilder,
) -> dict[int, _Row]:
    """The rows whose first answer a re-ask could fix, with their first request."""
    violations = judged.violations
    rows: dict[int, _Row] = {}
    for i, status in enumerate(judged.statuses):
        if status not in REASKED and not (status == "ok" and violations and violations[i]):
            continue
        body = first.bodies[i].as_py()
        request = json.loads(builder.build(records(i)))
        rows[i] = _Row(
            request=request,
            messages=list(request["messages"]),
            max_tokens=_int(request.get("max_tokens")),
            body=body,
            status=status,
            violations=violations[i] if violations is not None else None,
            attempts=[_attempt(status, _read(body))],
        )
    return rows


def _round(
    rows: Mapping[int, _Row], options: RepairOptions, budget: _Budget, context: int | None
) -> tuple[list[int], list[bytes], list[int | None]]:
    """The rows to re-ask in this round, their request bodies and max_tokens."""
    asked: list[int] = []
    bodies: list[bytes] = []
    raised: list[int | None] = []
    committed = budget.spent  # with the estimates of the re-asks admitted this round
    for i, row in rows.items():
        if row.done or not _wrong(row):
            continue
        answer = _read(row.body)
        plan = _plan(row, answer, options, context)
        if isinstance(plan, str):
            _note(row, plan)
            continue
        estimate = 2 * ((answer.prompt_tokens or 0) + (answer.completion_tokens or 0))
        if budget.limit is not None and committed + estimate > budget.limit:
            budget.refused += 1
            _note(
                row,
                f"not re-asked: repairTokenBudget={budget.limit} is spent ({budget.spent} tokens)",
            )
            continue
        committed += estimate
        reason, request, max_tokens = plan
        _say(row, reason)
        asked.append(i)
        bodies.append(json.dumps(request, ensure_ascii=False).encode("utf-8"))
        raised.append(max_tokens)
    return asked, bodies, raised


def _take(row: _Row, outcome: Outcome, verdict: Judged, k: int, max_tokens: int | None) -> int:
    """Record the answer to a re-ask of ``row`` (``k``: its place in the round); the tokens it
    cost."""
    if outcome.error is not None:  # the re-ask failed: the row keeps its last answer
        row.attempts.append(
            Attempt(
                status="http_error",
                reason=f"{outcome.error['type']}: {_cut(outcome.error['message'], 160)}",
                prompt_tokens=None,
                completion_tokens=None,
            )
        )
        return 0
    answer = _read(outcome.body)
    row.body = outcome.body
    row.max_tokens = max_tokens
    row.status = verdict.statuses[k]
    row.violations = verdict.violations[k] if verdict.violations is not None else None
    row.attempts.append(_attempt(row.status, answer))
    return (answer.prompt_tokens or 0) + (answer.completion_tokens or 0)


def _stats(
    asked: Sequence[_Row],
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
        fixed=sum(1 for row in asked if not _wrong(row)),
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


def _wrong(row: _Row) -> bool:
    return row.status in REASKED or (row.status == "ok" and bool(row.violations))


def _note(row: _Row, why: str) -> None:
    """The row is not asked again: say why on its last attempt."""
    row.done = True
    _say(row, why)


def _say(row: _Row, why: str) -> None:
    last = row.attempts[-1]
    last["reason"] = f"{last['reason']}; {why}" if last["reason"] else why


def _attempt(status: str, answer: _Answer) -> Attempt:
    return Attempt(
        status=status,
        reason=None,
        prompt_tokens=answer.prompt_tokens,
        completion_tokens=answer.completion_tokens,
    )


def _last(row: _Row, name: str) -> int:
    """The usage of the row's last answer (an attempt that failed holds none)."""
    for attempt in reversed(row.attempts):
        if attempt["status"] != "http_error":
            value = attempt[name]  # type: ignore[literal-required]
            return int(value or 0)
    return 0


def _plan(
    row: _Row, answer: _Answer, options: RepairOptions, context: int | None
) -> tuple[str, dict[str, Any], int | None] | str:
    """How to re-ask ``row``: (why, the request, its max_tokens), or why it is not re-asked."""
    if answer.refused:
        return "a refusal: not re-asked"
    if row.status == "truncated":
        current = row.max_tokens
        if current is None:
            return "cut at the model's limit (no max_tokens to raise): not re-asked"
        caps = {"repairMaxTokens": options.repair_max_tokens}
        if context is not None and answer.prompt_tokens is not None:
            caps["the model's context"] = context - answer.prompt_tokens
        raised = min([current * 2, *(c for c in caps.values() if c is not None)])
        if raised <= current:
            limit = min((c, name) for name, c in caps.items() if c is not None)[1]
            return f"cut at max_tokens={current}, already at {limit}: not re-asked"
        return (
            f"cut at max_tokens={current} (finish_reason length): re-asked with max_tokens="
            f"{raised}",
            {**row.request, "max_tokens": raised},
            raised,
        )
    problem = parse_error(answer.content) if row.status != "ok" else "schema violations"
    violations = row.violations if row.violations else None
    message = feedback(row.status, problem, violations)
    request = {
        **row.request,
        "messages": [
            *row.messages,
            {"role": "assistant", "content": answer.content or ""},
            {"role": "user", "content": message},
        ],
    }
    if row.max_tokens is not None:
        request["max_tokens"] = row.max_tokens
    what = f"{len(violations)} schema violation(s)" if violations else problem
    return f"{_cut(what, _ONE_PROBLEM)}: re-asked with the error named", request, row.max_tokens


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
