"""What an answer means for the request that got it, decided in one table the send loop obeys.

Each rule of :data:`RULES` names a kind of answer (a status, a header, a body's words) and its
:class:`Verdict`: what the request does next (:class:`Next`: take the answer, try again counted
against ``maxAttempts``, try again later until ``requestDeadline``, re-route to a replica that
serves its model, or fail), whether the answer counts towards resting the endpoint (a server
that is down), whether the in-flight limit backs off, whether the next attempt tries the
pool's other endpoints first, and whether it was the pool shedding the request. The first rule
that matches decides (:func:`judge`); a connection error, a body cut short or a timeout is
:data:`TRANSPORT`. The client (:mod:`dspark_json.http.client`) acts on the verdict and on nothing
else of the answer; when to try again (hints, backoff) is :mod:`.retry`'s business, what a
failure leaves in ``_error`` :mod:`.failures`'.

Shed signals (the pool saying "later", never a failure, never an endpoint's rest): llm-d's flow
control sheds a sheddable request with a 429 carrying ``x-llm-d-request-dropped-reason``
(:data:`DROPPED_REASON`), and a gateway whose pool has no endpoint yet (scaled to zero) answers
503, with that header or an Envoy-style body (:data:`NO_BACKEND_BODIES`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import httpx

from dspark_json.http.replicas import model_not_found
from dspark_json.http.retry import DOWN_STATUSES, QUOTA_SPENT, RETRY_STATUSES, rate_limited

__all__ = [
    "DROPPED_REASON",
    "NO_BACKEND_BODIES",
    "RULES",
    "TRANSPORT",
    "Next",
    "Rule",
    "Verdict",
    "judge",
]

#: The header llm-d's flow control sends with a request it shed (a 429; a 503 too).
DROPPED_REASON = "x-llm-d-request-dropped-reason"
#: What a gateway's 503 body says while its pool has no endpoint (scaled to zero): Envoy's, the
#: inference extension's, and the simulator's words (lower case; the body's first 4 KiB).
NO_BACKEND_BODIES = (
    b"no healthy upstream",
    b"no endpoints available",
    b"failed to find candidate",
    b"no backend",
)


class Next(StrEnum):
    """What a request does after an answer."""

    ANSWER = "answer"  # a 200: the row's answer
    RETRY = "retry"  # again, counted against maxAttempts
    LATER = "later"  # again after the hint or backoff, until requestDeadline (not counted)
    REROUTE = "reroute"  # at once, to a replica that serves the model, where there is one
    FAIL = "fail"  # the row's _error


@dataclass(frozen=True)
class Verdict:
    """What one answer means (see the module's docstring)."""

    next: Next
    #: Counts as a failure of a down server: three in a row rest the endpoint.
    rest: bool = False
    #: The in-flight limit backs off (the server or the pool is overloaded).
    back_off: bool = False
    #: The next attempt tries the pool's other endpoints first (a key's limit spent at one
    #: gateway of several, one busy replica).
    elsewhere_first: bool = False
    #: The pool shed the request (counted as ``shed`` in the metrics record and batch lines).
    shed: bool = False


@dataclass(frozen=True)
class Rule:
    """A kind of answer (``matches(status, headers, body)``) and what it means."""

    name: str
    matches: Callable[[int, httpx.Headers, bytes], bool]
    verdict: Verdict


def _no_backend(status: int, headers: httpx.Headers, body: bytes) -> bool:
    if status != 503:
        return False
    if DROPPED_REASON in headers:
        return True
    start = body[:4096].lower()
    return any(words in start for words in NO_BACKEND_BODIES)


#: The rules, the first that matches decides. A new kind of answer is one more line here.
RULES: tuple[Rule, ...] = (
    Rule("ok", lambda s, h, b: s == 200, Verdict(Next.ANSWER)),
    Rule(
        "shed",  # llm-d's flow control: the pool says later; the endpoint is healthy
        lambda s, h, b: s == 429 and DROPPED_REASON in h,
        Verdict(Next.LATER, back_off=True, elsewhere_first=True, shed=True),
    ),
    Rule(
        "no_backend",  # a gateway whose pool has no endpoint yet (scale from zero)
        _no_backend,
        Verdict(Next.LATER, elsewhere_first=True, shed=True),
    ),
    Rule(
        "quota_spent",  # no wait ends it: counted against maxAttempts
        lambda s, h, b: s == 429 and QUOTA_SPENT in b[:4096],
        Verdict(Next.RETRY, back_off=True),
    ),
    Rule(
        "down_rate_limited",  # a 503 with a hint: a dead backend's proxy may say so forever
        lambda s, h, b: s in DOWN_STATUSES and rate_limited(s, h, b),
        Verdict(Next.LATER, rest=True, back_off=True),
    ),
    Rule(
        "rate_limited",
        rate_limited,
        Verdict(Next.LATER, back_off=True, elsewhere_first=True),
    ),
    Rule("down", lambda s, h, b: s in DOWN_STATUSES, Verdict(Next.RETRY, rest=True, back_off=True)),
    Rule("overloaded", lambda s, h, b: s in RETRY_STATUSES, Verdict(Next.RETRY, back_off=True)),
    Rule("model_not_found", lambda s, h, b: model_not_found(s, b), Verdict(Next.REROUTE)),
    Rule("refused", lambda s, h, b: True, Verdict(Next.FAIL)),
)

#: A connection error, a body cut short or a timeout: a server that may be down.
TRANSPORT = Verdict(Next.RETRY, rest=True, back_off=True)


def judge(status: int, headers: httpx.Headers, body: bytes) -> Verdict:
    """The verdict of the first rule of :data:`RULES` that matches an answer."""
    for rule in RULES:
        if rule.matches(status, headers, body):
            return rule.verdict
    raise AssertionError("the last rule matches every answer")
