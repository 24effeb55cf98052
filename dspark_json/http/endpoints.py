"""Model server endpoints: where requests go, and which of them may be sent to right now.

Requests are spread round-robin over the healthy endpoints. An endpoint that fails
``fail_limit`` times in a row (connection errors, timeouts, 502/503/504) rests: nothing is sent
to it until a probe of its ``/health`` gets an HTTP answer below 500 (a gateway without
``/health`` answers 404, which counts as alive). Probes back off from 0.5 s to 10 s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from dspark_json.http.secrets import Secret

__all__ = ["Endpoint", "EndpointPool", "NoEndpoint"]

logger = logging.getLogger("dspark_json")

_PROBE_FIRST_S = 0.5
_PROBE_CAP_S = 10.0


@dataclass(frozen=True)
class Endpoint:
    """A server's base URL (no credentials in it) and the ``user:password`` taken out of it."""

    url: str
    credentials: Secret | None = None


class NoEndpoint(Exception):
    """Every endpoint rests and none came back in time."""


class EndpointPool:
    """Round-robin over the endpoints not resting; probes bring resting ones back."""

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        probe: Callable[[Endpoint], Awaitable[bool]],
        *,
        fail_limit: int = 3,
    ) -> None:
        self.endpoints = tuple(endpoints)
        self._probe = probe
        self._fail_limit = fail_limit
        self._failures = dict.fromkeys(self.endpoints, 0)
        self._resting: dict[Endpoint, asyncio.Task[None]] = {}
        self._next = 0
        self._back = asyncio.Event()
        self.rests = 0

    async def pick(self, timeout: float) -> Endpoint:
        """The next endpoint to send to; waits up to ``timeout`` s while all of them rest."""
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        while True:
            for _ in range(len(self.endpoints)):
                endpoint = self.endpoints[self._next % len(self.endpoints)]
                self._next += 1
                if endpoint not in self._resting:
                    return endpoint
            self._back.clear()
            left = until - loop.time()
            if left <= 0:
                raise NoEndpoint
            try:
                await asyncio.wait_for(self._back.wait(), left)
            except TimeoutError:
                raise NoEndpoint from None

    def succeeded(self, endpoint: Endpoint) -> None:
        self._failures[endpoint] = 0

    def failed(self, endpoint: Endpoint) -> None:
        self._failures[endpoint] += 1
        if self._failures[endpoint] >= self._fail_limit and endpoint not in self._resting:
            self.rests += 1
            logger.warning(
                "Endpoint %s failed %d times in a row; no requests go to it until its /health "
                "answers.",
                endpoint.url,
                self._failures[endpoint],
            )
            self._resting[endpoint] = asyncio.create_task(self._watch(endpoint))

    async def _watch(self, endpoint: Endpoint) -> None:
        wait = _PROBE_FIRST_S
        while True:
            await asyncio.sleep(wait)
            if await self._probe(endpoint):
                break
            wait = min(_PROBE_CAP_S, wait * 2)
        logger.info("Endpoint %s answers /health again; sending to it.", endpoint.url)
        self._failures[endpoint] = 0
        del self._resting[endpoint]
        self._back.set()

    async def close(self) -> None:
        for task in self._resting.values():
            task.cancel()
        await asyncio.gather(*self._resting.values(), return_exceptions=True)
        self._resting.clear()
