"""What a re-ask is (option ``repairAttempts``): which answers are asked again, and how.

A row whose answer is ``truncated``, ``not_json``, ``corrupt_content`` or (with
``validateSchema``) breaks the JSON Schema can be asked again:

- ``truncated``: the same request with ``max_tokens`` doubled (capped by ``repairMaxTokens`` and
  by what the model's context leaves after the prompt, where the server lists it);
- the others: the conversation extended with the model's answer and a user message that names
  what was wrong (the parse error, or the violations: path and message, capped in length),
  asking for the JSON only.

``http_error``, ``invalid_prompt``, ``invalid_utf8``, ``corrupt_envelope``, ``empty`` and
refusals are never re-asked. What the policy reads of an answer (content, finish_reason,
refusal, usage) is :class:`~dspark_json.response.answers.Answer`, read from the parser's table,
never from the body. The rounds, the budget and the journal are :mod:`.rounds`'s; the options,
:mod:`.options`'.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dspark_json.reask.options import RepairOptions
from dspark_json.response.answers import Answer
from dspark_json.response.content import extract_json
from dspark_json.rows import Attempt, Status
from dspark_json.schema.validation import NOT_VALIDATED

__all__ = [
    "BYTES_PER_TOKEN",
    "REASKED",
    "RowState",
    "by_length",
    "feedback",
    "is_wrong",
    "parse_error",
    "plan",
    "share_budget",
    "shorten",
    "token_cost",
    "whole_number",
]

#: The statuses a re-ask can fix (with validateSchema: an ``ok`` row with violations too).
REASKED = frozenset({Status.TRUNCATED, Status.NOT_JSON, Status.CORRUPT_CONTENT})
#: The longest text the re-ask message quotes of one problem, and of all of them.
_ONE_PROBLEM = 200
_ALL_PROBLEMS = 600


@dataclass
class RowState:
    """A row being repaired: its request, its answer now (the body, and what the parser's table
    says of it), its attempts."""

    request: dict[str, Any]
    messages: list[Any]  # the first request's messages
    max_tokens: int | None
    body: str | None
    answer: Answer
    status: str
    violations: list[str] | None
    attempts: list[Attempt]
    done: bool = False  # not to be asked again
    #: The first answer's prompt tokens (reported, else estimated) and its request's size: a
    #: re-ask's prompt is priced as those plus what it adds (:mod:`.rounds`).
    prompt_tokens: int = 0
    request_bytes: int = 0


#: Bytes per token where a server reports no usage (English text and JSON average about 4).
BYTES_PER_TOKEN = 4


def token_cost(answer: Answer, request: bytes, body: str | None) -> tuple[int, int, bool]:
    """What one answer cost in tokens: (prompt, completion, whether any is an estimate).

    Where the answer reports ``usage``, its ``prompt_tokens`` and ``completion_tokens``; each
    that it lacks is estimated from a length at :data:`BYTES_PER_TOKEN` bytes a token, rounded
    up: the prompt from the request body's, the completion from the answer body's (the
    envelope included, so the estimate errs high by some 50 tokens, which a budget prefers to
    erring low)."""
    prompt, completion = answer.prompt_tokens, answer.completion_tokens
    estimated = prompt is None or completion is None
    if prompt is None:
        prompt = by_length(len(request))
    if completion is None:
        completion = by_length(len((body or "").encode("utf-8")))
    return prompt, completion, estimated


def by_length(size: int) -> int:
    """The tokens of ``size`` bytes of text, estimated (:data:`BYTES_PER_TOKEN`, rounded up)."""
    return -(-size // BYTES_PER_TOKEN)


def whole_number(value: Any) -> int | None:
    """``value`` where it is a JSON integer, else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def shorten(text: str, limit: int) -> str:
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
        listed = "; ".join(shorten(v, _ONE_PROBLEM) for v in violations)
        return (
            "Your answer breaks the JSON Schema: "
            f"{shorten(listed, _ALL_PROBLEMS)}. Answer again with only the corrected JSON "
            "document, no prose and no Markdown."
        )
    return (
        f"Your answer could not be read ({status}: {shorten(problem, _ONE_PROBLEM)}). Answer again "
        "with only the JSON document, no prose and no Markdown."
    )


def plan(
    row: RowState, answer: Answer, options: RepairOptions, context: int | None
) -> tuple[str, dict[str, Any], int | None] | str:
    """How to re-ask ``row``: (why, the request, its max_tokens), or why it is not re-asked."""
    if answer.refused:
        return "a refusal: not re-asked"
    if row.status == Status.TRUNCATED:
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
    problem = parse_error(answer.content) if row.status != Status.OK else "schema violations"
    # JSON that could not be read is the parse error's to name, not a schema violation.
    # A tool call's own entry (``tool_calls.f[0].arguments: not validated: ...``) stays: the
    # content holds nothing to name then.
    violations = [
        v for v in row.violations or () if NOT_VALIDATED not in v or not v.startswith("$")
    ] or None
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
    return f"{shorten(what, _ONE_PROBLEM)}: re-asked with the error named", request, row.max_tokens


def share_budget(budget: int, rows: Sequence[int]) -> list[int]:
    """Option repairTokenBudget over the tasks of one micro-batch: each task's share, in
    proportion to its ``rows`` (rounded down), what the rounding leaves going to the first; the
    shares add up to ``budget``."""
    if not rows:
        return []
    total = sum(rows)
    shares = [budget * n // total for n in rows] if total else [0] * len(rows)
    shares[0] += budget - sum(shares)
    return shares


def is_wrong(row: RowState) -> bool:
    """Whether the row's answer now is one a re-ask could fix."""
    return row.status in REASKED or (row.status == Status.OK and bool(row.violations))
