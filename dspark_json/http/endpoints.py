"""Model server endpoints: where requests go, and which of them may be sent to right now.

Requests are spread round-robin over the healthy endpoints, or go to the first healthy one of
the endpoints they prefer (option ``prefixOrder``: :mod:`dspark_json.http.order`). An endpoint
that fails ``fail_limit`` times in a row (connection errors, timeouts, 502/503/504, a 503
with a retry hint too: a proxy in front of a dead server may send one forever) rests: nothing
is sent to it until a probe of its ``/v1/models`` (:data:`PROBE_PATH`) gets an HTTP answer
below 500. Then it is on probation: its completions decide, as one success clears it and one
more failure rests it again, with the next probe later (probes back off from 0.5 s to 10 s,
across rests on probation too).

Why ``/v1/models`` and not ``/health`` (option ``healthPath``, checked at ``.load()``): every
OpenAI-compatible server and gateway answers it without sending a completion (LiteLLM's
``/health`` sends one to every model behind it), and a router answers it for itself, where its
``/health`` is an aggregate of its workers (vllm-router's is 503 while any one is down, though
completions go through). Whether the endpoint is back is then said by its own completions.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dspark_json.http.secrets import Secret

if TYPE_CHECKING:
    import asyncio

__all__ = ["PROBE_PATH", "Endpoint", "EndpointPool", "NoEndpoint", "NoServer"]

logger = logging.getLogger("dspark_json")

#: Where a resting endpoint is probed (the module's docstring says why).
PROBE_PATH = "/v1/models"
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
        import asyncio  # here: Spark's planning workers parse the endpoints, run no pool

        self.endpoints = tuple(endpoints)
        self._probe = probe
        self._fail_limit = fail_limit
        self._deadline = deadline
        self._backlog = backlog
        self._warn_every = WAIT_WARN_S if warn_every is None else warn_every
        self._failures = dict.fromkeys(self.endpoints, 0)
        self._resting: dict[Endpoint, asyncio.Task[None]] = {}
        # Endpoints back from a rest whose completions have not yet succeeded: the first
        # probe wait of their next rest (it doubles while they fail again).
        self._probation: dict[Endpoint, float] = {}
        self._down_since: dict[Endpoint, float] = {}
        self._all_down_since: float | None = None
        self._waiting: Counter[float] = Counter()  # when each waiting prompt began to wait
        self._nag: asyncio.Task[None] | None = None
        self._next = 0
        self._back = asyncio.Event()
        self.rests = 0

    def others(
        self, first: Endpoint, allowed: Callable[[Endpoint], bool] | None = None
    ) -> list[Endpoint]:
        """The endpoints other than ``first`` that a request may go to now (not resting, and
        accepted by ``allowed`` where given), in turn from the one after ``first``."""
        order = list(self.endpoints)
        at = order.index(first) + 1 if first in order else 0
        return [
            e
            for e in order[at:] + order[:at]
            if e != first and e not in self._resting and (allowed is None or allowed(e))
        ]

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
        import asyncio

        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        began = loop.time()
        while True:
            # No endpoint at all (a pool scaled to zero) is waited for, not a model unserved.
            if (
                allowed is not None
                and self.endpoints
                and not any(allowed(e) for e in self.endpoints)
            ):
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
            self._probation.pop(endpoint, None)
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
            if self._probation.pop(endpoint, None) is not None:
                logger.info("Endpoint %s completes requests again.", endpoint.url)

    def failed(self, endpoint: Endpoint) -> None:
        import asyncio

        if endpoint not in self._failures:  # removed while its request was in flight
            return
        self._failures[endpoint] += 1
        on_probation = endpoint in self._probation
        if (
            self._failures[endpoint] >= self._fail_limit or on_probation
        ) and endpoint not in self._resting:
            self.rests += 1
            logger.warning(
                "Endpoint %s failed %d times in a row%s; no requests go to it until its %s "
                "answers.",
                endpoint.url,
                self._failures[endpoint],
                " after it came back" if on_probation else "",
                PROBE_PATH,
            )
            loop = asyncio.get_running_loop()
            self._down_since[endpoint] = loop.time()
            first = self._probation.get(endpoint, _PROBE_FIRST_S)
            self._resting[endpoint] = asyncio.create_task(self._watch(endpoint, first))
            if len(self._resting) == len(self.endpoints):
                self._all_down_since = loop.time()
            if self._nag is None or self._nag.done():
                self._nag = asyncio.create_task(self._warn_while_down())

    async def _warn_while_down(self) -> None:
        """A WARN every ``warn_every`` s while any endpoint rests."""
        import asyncio

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
                "Endpoint %s not answering %s; %s. %d prompt(s) of this task wait for an "
                "endpoint (the longest for %.0fs), %d more not started; a prompt gives up "
                "after requestDeadline=%gs (its row then gets _error endpoint_unavailable).",
                down,
                PROBE_PATH,
                f"requests go to the {others} other endpoint(s)"
                if others
                else "no endpoint is left to send to",
                waiting,
                longest,
                backlog,
                self._deadline,
            )

    async def _watch(self, endpoint: Endpoint, wait: float) -> None:
        import asyncio

        while True:
            await asyncio.sleep(wait)
            wait = min(_PROBE_CAP_S, wait * 2)
            if await self._probe(endpoint):
                break
        logger.info(
            "Endpoint %s answers %s again; sending to it (one more failure rests it again).",
            endpoint.url,
            PROBE_PATH,
        )
        if endpoint not in self._failures:  # removed meanwhile
            return
        self._failures[endpoint] = 0
        self._probation[endpoint] = wait
        del self._resting[endpoint]
        self._down_since.pop(endpoint, None)
        self._all_down_since = None
        self._back.set()

    async def close(self) -> None:
        import asyncio

        tasks = [*self._resting.values(), *([self._nag] if self._nag is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._resting.clear()
