"""The in-flight limit of one task's client, adapted to what the server can take.

vLLM never answers "busy": its waiting queue is unbounded, so overload shows only as latency that
keeps growing (and, behind a gateway, as 429/503 or timeouts). The rule, per window of about one
round trip (``limit`` completions):

* slow start: the limit doubles per window until the first sign of congestion;
* then additive increase: +1 per window while the window's median latency stays within
  ``tolerance`` x the baseline: the lowest window median of the last 5 minutes. A memory in
  time, not in windows: a queue the limit itself builds would otherwise become the baseline
  within a few (short) windows and let the limit climb back; 5 minutes still follows a server
  that got slower for good (longer answers);
* multiplicative decrease: x0.8 when the median grows beyond that (requests are queueing in the
  server), x0.5 on a timeout, 429, 5xx or connection error, at most once per window.

With adaptation off the limit stays at its maximum.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

__all__ = ["AdaptiveLimit"]

_MEMORY_S = 300.0  # how long a window median counts towards the baseline


class AdaptiveLimit:
    """An asyncio gate: at most ``int(limit)`` holders at once; ``limit`` moves with feedback."""

    def __init__(
        self, initial: int, maximum: int, *, adaptive: bool = True, tolerance: float = 2.0
    ) -> None:
        self.maximum = max(1, maximum)
        self.adaptive = adaptive
        self.limit = float(min(initial, self.maximum) if adaptive else self.maximum)
        self.tolerance = tolerance
        self.in_flight = 0
        self.peak = int(self.limit)
        self.lowest = int(self.limit)
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._window: list[float] = []
        self._medians: deque[tuple[float, float]] = deque()  # (when, median), oldest first
        self._slow_start = True
        self._since_cut = 1 << 30  # completions since the last cut

    async def acquire(self) -> None:
        if self.in_flight < int(self.limit) and not self._waiters:
            self.in_flight += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was granted just before the cancel
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < int(self.limit):
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)

    def on_success(self, latency: float) -> None:
        """A request succeeded after ``latency`` seconds."""
        if not self.adaptive:
            return
        self._since_cut += 1
        self._window.append(latency)
        if len(self._window) < max(4, int(self.limit)):
            return
        self._window.sort()
        median = self._window[len(self._window) // 2]
        self._window.clear()
        now = time.monotonic()
        while self._medians and self._medians[0][0] < now - _MEMORY_S:
            self._medians.popleft()
        baseline = min((m for _, m in self._medians), default=median)
        self._medians.append((now, median))
        if median > self.tolerance * baseline:
            self._slow_start = False
            self._set(self.limit * 0.8)
        elif self._slow_start:
            self._set(self.limit * 2)
        else:
            self._set(self.limit + 1)

    def on_overload(self) -> None:
        """A timeout, 429, 5xx or connection error: back off, once per window."""
        if not self.adaptive:
            return
        self._since_cut += 1
        if self._since_cut <= int(self.limit):
            return
        self._slow_start = False
        self._since_cut = 0
        self._window.clear()
        self._set(self.limit * 0.5)

    def _set(self, value: float) -> None:
        self.limit = min(float(self.maximum), max(1.0, value))
        self.peak = max(self.peak, int(self.limit))
        self.lowest = min(self.lowest, int(self.limit))
        self._wake()
