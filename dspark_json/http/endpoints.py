"""Model server endpoints: where requests go, and which of them may be sent to right now.

Requests are spread round-robin over the healthy endpoints, or go to the first healthy one of
the endpoints they prefer (option ``prefixOrder``: :mod:`dspark_json.http.order`). An endpoint
that fails ``fail_limit`` times in a row (connection errors, timeouts, 502/503/504) rests:
nothing is sent to it until a probe of its ``/health`` gets an HTTP answer below 500 (a gateway
without ``/health`` answers 404, which counts as alive). Probes back off from 0.5 s to 10 s.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from dspark_json.http.secrets import Secret

__all__ = ["Endpoint", "EndpointPool", "NoEndpoint", "NoServer"]

logger = logging.getLogger("dspark_json")

_PROBE_FIRST_S = 0.5
_PROBE_CAP_S = 10.0
#: Seconds between the WARNs that say an endpoint is down and prompts wait.
WAIT_WARN_S = 30.0


@dataclass(frozen=True)
class Endpoint:
    """A server's base URL (no credentials in it) and the ``user:password`` taken out of it.

    ``host``: where ``url`` holds one of the addresses a host name resolved to
    (:mod:`dspark_json.http.replicas`), the name (``name[:port]``): sent as the ``Host`` header
    and as the TLS server name, so that a virtual host and a certificate see the name."""

    url: str
    credentials: Secret | None = None
    host: str | None = None


class NoEndpoint(Exception):
    """Every endpoint rests and none came back in time."""


class NoServer(Exception):
    """No endpoint (resting or not) serves the request's model."""


class EndpointPool:
    """Round-robin over the endpoints not resting; probes bring resting ones back."""

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        probe: Callable[[Endpoint], Awaitable[bool]],
        *,
        fail_limit: int = 3,
        deadline: float = float("inf"),
        backlog: Callable[[], int] | None = None,
        warn_every: float | None = None,
    ) -> None:
        """``deadline``: the requestDeadline (for the WARNs, and how long an outage of every
        endpoint may last before prompts give up at once); ``backlog``: how many of the task's
        prompts have not started (for the WARNs); ``warn_every``: default :data:`WAIT_WARN_S`."""
        self.endpoints = tuple(endpoints)
        self._probe = probe
        self._fail_limit = fail_limit
        self._deadline = deadline
        self._backlog = backlog
        self._warn_every = WAIT_WARN_S if warn_every is None else warn_every
        self._failures = dict.fromkeys(self.endpoints, 0)
        self._resting: dict[Endpoint, asyncio.Task[None]] = {}
        self._down_since: dict[Endpoint, float] = {}
        self._all_down_since: float | None = None
        self._waiting: Counter[float] = Counter()  # when each waiting prompt began to wait
        self._nag: asyncio.Task[None] | None = None
        self._next = 0
        self._back = asyncio.Event()
        self.rests = 0

    async def pick(
        self,
        timeout: float,
        prefer: Sequence[Endpoint] = (),
        allowed: Callable[[Endpoint], bool] | None = None,
    ) -> Endpoint:
        """The next endpoint to send to: the first of ``prefer`` not resting, else round-robin;
        waits up to ``timeout`` s while all of them rest. ``allowed``: only the endpoints it
        accepts (those that serve the request's model); :class:`NoServer` where it accepts
        none of the pool's endpoints."""
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        began = loop.time()
        while True:
            if allowed is not None and not any(allowed(e) for e in self.endpoints):
                raise NoServer
            for endpoint in prefer:
                if (
                    endpoint not in self._resting
                    and endpoint in self._failures
                    and (allowed is None or allowed(endpoint))
                ):
                    return endpoint
            for _ in range(len(self.endpoints)):
                endpoint = self.endpoints[self._next % len(self.endpoints)]
                self._next += 1
                if endpoint not in self._resting and (allowed is None or allowed(endpoint)):
                    return endpoint
            self._back.clear()
            if self._all_down_since is not None:  # an outage outlasts the deadline
                until = min(until, self._all_down_since + self._deadline)
            left = until - loop.time()
            if left <= 0:
                raise NoEndpoint
            self._waiting[began] += 1
            try:
                await asyncio.wait_for(self._back.wait(), left)
            except TimeoutError:
                raise NoEndpoint from None
            finally:
                self._waiting[began] -= 1
                if not self._waiting[began]:
                    del self._waiting[began]

    def replace(self, endpoints: Sequence[Endpoint]) -> None:
        """The endpoints from now on (replicas that came and went): a removed one gets no new
        request (its requests in flight finish; a retry goes elsewhere), a new one starts
        without failures; waiting prompts look again."""
        self.endpoints = tuple(endpoints)
        for endpoint in self.endpoints:
            self._failures.setdefault(endpoint, 0)
        for endpoint in [e for e in self._failures if e not in self.endpoints]:
            del self._failures[endpoint]
            self._down_since.pop(endpoint, None)
            watch = self._resting.pop(endpoint, None)
            if watch is not None:
                watch.cancel()
        if len(self._resting) < len(self.endpoints):
            self._all_down_since = None
        self._back.set()

    def succeeded(self, endpoint: Endpoint) -> None:
        if endpoint in self._failures:
            self._failures[endpoint] = 0

    def failed(self, endpoint: Endpoint) -> None:
        if endpoint not in self._failures:  # removed while its request was in flight
            return
        self._failures[endpoint] += 1
        if self._failures[endpoint] >= self._fail_limit and endpoint not in self._resting:
            self.rests += 1
            logger.warning(
                "Endpoint %s failed %d times in a row; no requests go to it until its /health "
                "answers.",
                endpoint.url,
                self._failures[endpoint],
            )
            loop = asyncio.get_running_loop()
            self._down_since[endpoint] = loop.time()
            self._resting[endpoint] = asyncio.create_task(self._watch(endpoint))
            if len(self._resting) == len(self.endpoints):
                self._all_down_since = loop.time()
            if self._nag is None or self._nag.done():
                self._nag = asyncio.create_task(self._warn_while_down())

    async def _warn_while_down(self) -> None:
        """A WARN every ``warn_every`` s while any endpoint rests."""
        loop = asyncio.get_running_loop()
        while self._resting:
            await asyncio.sleep(self._warn_every)
            if not self._resting:
                break
            now = loop.time()
            down = ", ".join(
                f"{e.url} (for {now - since:.0f}s)" for e, since in self._down_since.items()
            )
            waiting = sum(self._waiting.values())
            longest = now - min(self._waiting) if self._waiting else 0.0
            backlog = self._backlog() if self._backlog is not None else 0
            others = len(self.endpoints) - len(self._resting)
            logger.warning(
                "Endpoint %s not answering /health; %s. %d prompt(s) of this task wait for an "
                "endpoint (the longest for %.0fs), %d more not started; a prompt gives up "
                "after requestDeadline=%gs (its row then gets _error endpoint_unavailable).",
                down,
                f"requests go to the {others} other endpoint(s)"
                if others
                else "no endpoint is left to send to",
                waiting,
                longest,
                backlog,
                self._deadline,
            )

    async def _watch(self, endpoint: Endpoint) -> None:
        wait = _PROBE_FIRST_S
        while True:
            await asyncio.sleep(wait)
            if await self._probe(endpoint):
                break
            wait = min(_PROBE_CAP_S, wait * 2)
        logger.info("Endpoint %s answers /health again; sending to it.", endpoint.url)
        if endpoint not in self._failures:  # removed meanwhile
            return
        self._failures[endpoint] = 0
        del self._resting[endpoint]
        self._down_since.pop(endpoint, None)
        self._all_down_since = None
        self._back.set()

    async def close(self) -> None:
        tasks = [*self._resting.values(), *([self._nag] if self._nag is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._resting.clear()
