"""Token budgets: option ``maxTokensPerMinute`` (a gateway key's TPM limit, as LiteLLM's and the
providers' quotas count) and option ``maxTokensInFlight`` (the tokens a task has in flight at
one endpoint, as the Gateway API inference extension's token mode bounds them).

A request's tokens are not known before its answer: it is counted at :func:`estimate` while in
flight (its body's bytes / 4, the prompt, plus its ``max_tokens``, or
:data:`COMPLETION_ESTIMATE` where it names none), and at its answer's ``usage.total_tokens``
once answered (:func:`used_tokens`; the estimate where the answer has none; nothing for an
answer that is not a 200: a gateway counts what it served). The minute is a sliding window of
the answers' tokens, plus the estimates of those in flight. A request that alone is over a
budget is sent once nothing else is counted, so that it cannot wait forever.

``maxTokensPerMinute`` is the stream's: each micro-batch's tasks share it evenly (the share set
at planning, :mod:`dspark_json.source`), so that together they stay under it even when all run
at once; micro-batches run one after another, and the minute goes on across them: the driver
hands each task its share of what the last micro-batches spent within the minute (from their
metrics records, option ``metrics``: ``spent``), counted as answers at those times.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import deque
from collections.abc import Hashable, Sequence

__all__ = ["COMPLETION_ESTIMATE", "TokenBudget", "estimate", "used_tokens"]

#: The completion tokens counted for a request that names no ``max_tokens`` (set option
#: maxTokens to count the real bound).
COMPLETION_ESTIMATE = 512
#: Bytes of a request body per prompt token, for the estimate (English text and JSON: ~4).
BYTES_PER_TOKEN = 4
_WINDOW_S = 60.0

_MAX_TOKENS = re.compile(rb'"max(?:_completion)?_tokens": *(\d+)')
_TOTAL = re.compile(rb'"total_tokens": *(\d+)')


def estimate(payload: bytes) -> int:
    """A request's tokens before its answer: the body's bytes / 4, plus its ``max_tokens``
    (else :data:`COMPLETION_ESTIMATE`)."""
    found = _MAX_TOKENS.search(payload)
    completion = int(found.group(1)) if found else COMPLETION_ESTIMATE
    return len(payload) // BYTES_PER_TOKEN + completion


def used_tokens(body: bytes) -> int | None:
    """The answer's ``usage.total_tokens`` (the last one in the body: usage follows the
    choices), or ``None`` where it gives none."""
    found = _TOTAL.findall(body[-4096:]) or _TOTAL.findall(body)
    return int(found[-1]) if found else None


class TokenBudget:
    """A task's token budgets: per minute (all endpoints), and in flight per endpoint."""

    def __init__(
        self,
        per_minute: int | None,
        in_flight: int | None,
        *,
        spent: Sequence[tuple[float, int]] = (),
    ) -> None:
        self.per_minute = per_minute
        self.in_flight = in_flight
        self._spent: deque[tuple[float, int]] = deque()  # (when answered, loop time; tokens)
        self._spent_total = 0
        #: Spent before this task (wall time, tokens): counted from the first request on.
        self._before = sorted(spent) if per_minute is not None else []
        self._pending = 0  # estimates of the requests in flight (per minute)
        self._at: dict[Hashable, int] = {}  # estimates in flight by endpoint
        self._changed = asyncio.Event()
        #: Seconds requests waited for a budget (summed over requests).
        self.waited_s = 0.0

    @property
    def active(self) -> bool:
        return self.per_minute is not None or self.in_flight is not None

    async def acquire(self, endpoint: Hashable, tokens: int, deadline: float) -> bool:
        """Count ``tokens`` in flight at ``endpoint`` once both budgets have room; False
        (nothing counted) where ``deadline`` (loop time) comes first."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        if self._before:  # the last micro-batches' spend, in this loop's time
            ago = time.time() - loop.time()
            for wall, before in self._before:
                self._spent.append((wall - ago, before))
                self._spent_total += before
            self._before = []
        try:
            while not self._room(endpoint, tokens, loop.time()):
                left = deadline - loop.time()
                if left <= 0:
                    return False
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), min(left, self._next_expiry()))
        finally:
            self.waited_s += loop.time() - started
        self._pending += tokens
        self._at[endpoint] = self._at.get(endpoint, 0) + tokens
        return True

    def release(self, endpoint: Hashable, tokens: int, used: int | None) -> None:
        """A request counted with ``tokens`` ended, having spent ``used`` tokens (``None``:
        none), counted in the minute from now."""
        self._pending -= tokens
        self._at[endpoint] = self._at.get(endpoint, 0) - tokens
        if used:
            loop = asyncio.get_running_loop()
            self._spent.append((loop.time(), used))
            self._spent_total += used
        self._changed.set()

    def _room(self, endpoint: Hashable, tokens: int, now: float) -> bool:
        self._expire(now)
        if self.in_flight is not None:
            at = self._at.get(endpoint, 0)
            if at and at + tokens > self.in_flight:
                return False
        if self.per_minute is not None:
            counted = self._spent_total + self._pending
            if counted and counted + tokens > self.per_minute:
                return False
        return True

    def _expire(self, now: float) -> None:
        while self._spent and self._spent[0][0] <= now - _WINDOW_S:
            self._spent_total -= self._spent.popleft()[1]

    def _next_expiry(self) -> float:
        """Seconds until the oldest answer leaves the minute (a wait's longest step)."""
        if not self._spent:
            return _WINDOW_S
        loop = asyncio.get_running_loop()
        return max(0.01, self._spent[0][0] + _WINDOW_S - loop.time())
