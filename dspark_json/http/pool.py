"""The pool a task sends into, owned by one object: :class:`Pool`.

What a request needs before it is sent, and what its answer changes, is the pool's business, not
the send loop's: which endpoints exist now and which models each serves
(:class:`~dspark_json.http.replicas.Replicas`), which of them rest
(:class:`~dspark_json.http.endpoints.EndpointPool`), the room their ``/metrics`` shows (option
``maxServerQueue``: :class:`~dspark_json.http.gauges.Gate`, its reading shared by the machine's
tasks through :mod:`.readings`), the in-flight limit of each (endpoint, model)
(:class:`~dspark_json.http.concurrency.AdaptiveLimit`), and the token budgets (options
``maxTokensPerMinute``, ``maxTokensInFlight``: :class:`~dspark_json.http.tokens.TokenBudget`).

The client (:mod:`dspark_json.http.client`) asks :meth:`Pool.place` for a :class:`Place` (an
endpoint, its limit, the tokens counted: every hold taken), sends, has the answer judged
(:mod:`.verdicts`) and gives the verdict back to :meth:`Pool.obey`, which frees the place and does
what the verdict says to the limit and the endpoints. The HTTP calls the pool makes of its own
(``/v1/models``, probes, ``/metrics``, the priority check) are the client's, handed in as
functions: the pool knows no transport.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from dspark_json.http.concurrency import AdaptiveLimit
from dspark_json.http.endpoints import Endpoint, EndpointPool, NoEndpoint, NoServer
from dspark_json.http.failures import (
    body_error,
    budget_error,
    held_error,
    model_unavailable_error,
    no_endpoint_error,
)
from dspark_json.http.gauges import Gate, MetricsFetch
from dspark_json.http.options import HttpOptions
from dspark_json.http.readings import shared
from dspark_json.http.replicas import Replicas, model_not_found
from dspark_json.http.secrets import Secret
from dspark_json.http.tokens import TokenBudget, estimate, used_tokens
from dspark_json.http.transport import BodyRefused
from dspark_json.http.verdicts import Next, Verdict
from dspark_json.records import Outcome
from dspark_json.rows import RowError

__all__ = ["Place", "Pool"]

#: ``GET path`` on an endpoint: (status, body).
Get = Callable[[Endpoint, str], Awaitable[tuple[int, bytes]]]
#: ``GET /metrics`` on an endpoint, the body held to a number of bytes: (status, body).
Metrics = Callable[[Endpoint, int], Awaitable[tuple[int, bytes]]]


@dataclass(frozen=True)
class Place:
    """A request's place for one attempt: its ``endpoint``, the in-flight ``limit`` it counts
    in, the ``tokens`` it counts in the budgets, and when it was given (``time.perf_counter``)."""

    endpoint: Endpoint
    limit: AdaptiveLimit
    tokens: int
    started: float


class Pool:
    """One task's pool: endpoints, replicas and their models, the gate, the in-flight limits by
    (endpoint, model), the token budgets (see the module's docstring).

    ``probe(endpoint)`` says whether a resting endpoint is up again; ``get(endpoint, path)``
    reads its ``/v1/models``; ``metrics(endpoint, limit)`` its ``/metrics``; ``admit(endpoint,
    models)`` (option ``priority``) whether a replica that appeared may get requests;
    ``changed(endpoints)`` is told the endpoints after a change; ``backlog()`` counts the
    requests not yet started (for the rest's WARN)."""

    def __init__(
        self,
        config: HttpOptions,
        secrets: list[Secret | None],
        *,
        probe: Callable[[Endpoint], Awaitable[bool]],
        get: Get,
        metrics: Metrics,
        admit: Callable[[Endpoint, frozenset[str] | None], Awaitable[bool]] | None,
        changed: Callable[[tuple[Endpoint, ...]], None],
        backlog: Callable[[], int],
    ) -> None:
        self.config = config
        #: What no error or log line may show (the key, endpoints' credentials, secret headers);
        #: the credentials of replicas that appear are added.
        self.secrets = secrets
        self._metrics = metrics
        self._changed = changed
        self.endpoints = EndpointPool(
            config.endpoints, probe, deadline=config.request_deadline, backlog=backlog
        )
        self.replicas = Replicas(config, get, self._replaced, admit=admit)
        # Option maxServerQueue: new requests wait while an endpoint's /metrics says it is full.
        limit = config.max_server_queue
        route = config.request_headers.route()  # what readings and leases are shared by
        self.gate = Gate(limit, route=route, width=config.pool_width) if limit is not None else None
        # Options maxTokensPerMinute, maxTokensInFlight: http.tokens; the minute's spend of the
        # stream's last micro-batches (the driver's) counted.
        self.budget = TokenBudget(
            config.max_tokens_per_minute, config.max_tokens_in_flight, spent=config.tokens_spent
        )
        self.limit = self._new_limit()  # the task's one limit, where it does not route by model
        self.limits: dict[tuple[Endpoint, str | None], AdaptiveLimit] = {}  # by model

    async def start(self, models: Sequence[str | None]) -> None:
        """Discover the replicas (routing by model where it can matter: http.replicas)."""
        await self.replicas.start(models)

    async def close(self) -> None:
        """The task sends no more: its share of the pools' room goes to the other tasks."""
        if self.gate is not None:
            self.gate.close()
        await self.replicas.close()
        await self.endpoints.close()

    @property
    def held_s(self) -> float:
        """Seconds requests were held: at the gate, and waiting for the token budgets."""
        return (self.gate.held_s if self.gate is not None else 0.0) + self.budget.waited_s

    def all_limits(self) -> list[AdaptiveLimit]:
        """Every in-flight limit the task used (its one limit where it did not route by model)."""
        return list(self.limits.values()) or [self.limit]

    def tokens(self, payload: bytes) -> int:
        """What a request counts in the token budgets while in flight (0 without them)."""
        return estimate(payload) if self.budget.active else 0

    # -- place --------------------------------------------------------------------------------

    async def place(
        self,
        deadline: float,
        prefer: Sequence[Endpoint],
        model: str | None,
        error: RowError | None,
        attempt: int,
        *,
        tokens: int = 0,
    ) -> Place | Outcome:
        """The place of a request's attempt number ``attempt``: an endpoint (one that serves
        ``model`` where the client routes by model, ``prefer``'s first that does not rest),
        room there (the gate), in its in-flight limit, and for its ``tokens`` in the budgets;
        the row's outcome where none comes before ``deadline`` (loop time). A request that
        waited while its replica left the pool or stopped serving its model picks again,
        within what is left of the deadline."""
        while True:
            picked = await self._endpoint(deadline, prefer, model, error, attempt - 1)
            if isinstance(picked, Outcome):
                return picked
            admitted = await self._admit(picked, model, deadline, error=error, attempt=attempt)
            if isinstance(admitted, Outcome):
                return admitted
            if admitted is None:
                continue  # its endpoint left the pool while it waited at the gate: pick again
            endpoint, limit = admitted
            if self._still_serves(endpoint, model):
                if not self.budget.active or await self.budget.acquire(endpoint, tokens, deadline):
                    return Place(endpoint, limit, tokens, time.perf_counter())
                self._release(endpoint, limit)
                deadline_s = self.config.request_deadline
                return Outcome(error=error or budget_error(deadline_s, attempt - 1))
            self._release(endpoint, limit)

    async def _endpoint(
        self,
        deadline: float,
        prefer: Sequence[Endpoint],
        model: str | None,
        error: RowError | None,
        attempt: int,
    ) -> Endpoint | Outcome:
        """The endpoint of a request's next attempt (one that serves its ``model`` where the
        client routes by model); the row's outcome where none comes before ``deadline``."""
        loop = asyncio.get_running_loop()
        while True:
            left = deadline - loop.time()
            try:
                return await self.endpoints.pick(left, prefer, self.replicas.allows(model))
            except NoServer:
                if left <= 0:
                    return self.unserved(model, error, attempt)
                await self.replicas.wait_for(model or "", left)
            except NoEndpoint:
                urls = [e.url for e in self.endpoints.endpoints]
                return Outcome(
                    error=no_endpoint_error(
                        urls or ["option endpointsFile lists none"],
                        self.config.request_deadline,
                        error,
                        attempt,
                        self.secrets,
                    )
                )

    def _limit_for(self, endpoint: Endpoint, model: str | None) -> AdaptiveLimit:
        """The in-flight limit of requests for ``model`` at ``endpoint`` where the client
        routes by model (each adapts to its own latency: a 70B model's queue does not hold
        back a 7B's); the task's one limit otherwise. The workers still bound the task's
        requests in flight to maxConcurrency in all."""
        if not self.replicas.active:
            return self.limit
        key = (endpoint, model)
        limit = self.limits.get(key)
        if limit is None:
            limit = self.limits[key] = self._new_limit()
        return limit

    def _new_limit(self) -> AdaptiveLimit:
        config = self.config
        return AdaptiveLimit(
            config.initial_concurrency, config.max_concurrency, adaptive=config.adaptive_concurrency
        )

    def _still_serves(self, endpoint: Endpoint, model: str | None) -> bool:
        """Whether ``endpoint`` is still one of the pool's and, where the client routes by
        model, still serves ``model`` (a request waited for its place meanwhile)."""
        if not self.replicas.active:
            return True
        allowed = self.replicas.allows(model)
        return endpoint in self.replicas.endpoints and (allowed is None or allowed(endpoint))

    async def _admit(
        self,
        picked: Endpoint,
        model: str | None,
        deadline: float,
        *,
        error: RowError | None,
        attempt: int,
    ) -> Outcome | tuple[Endpoint, AdaptiveLimit] | None:
        """Room on the server (option maxServerQueue: the gate, at ``picked`` or, where it has
        none and another endpoint that serves ``model`` has, there), then in the endpoint's
        in-flight limit: the endpoint and its limit. None where ``picked`` left the pool or
        stopped serving ``model`` while the request waited at the gate (nothing taken: it
        picks again); the outcome of the prompt where a hold at the gate spent its
        ``deadline`` (loop time): nothing is sent then."""
        loop = asyncio.get_running_loop()
        endpoint = picked
        if self.gate is not None:
            chosen = await self._gate(picked, model, deadline)
            if chosen is None:
                return None
            endpoint = chosen
        limit = self._limit_for(endpoint, model)
        await limit.acquire()
        if self.gate is not None:
            self.gate.sent(endpoint.url)
        if self.gate is None or loop.time() < deadline:
            return endpoint, limit
        self._release(endpoint, limit)
        return Outcome(error=error or held_error(self.config.request_deadline, attempt - 1))

    async def _gate(self, picked: Endpoint, model: str | None, deadline: float) -> Endpoint | None:
        """Wait at the gate for room at ``picked``, or at another endpoint that serves ``model``
        and does not rest, whichever has room first (until ``deadline`` at most): the endpoint
        with room. Where the client routes by model, stop waiting (None) once ``picked`` left
        the pool or stopped serving ``model``: a replica removed while saturated does not hold
        the request to its deadline."""
        assert self.gate is not None
        gate = self.gate
        loop = asyncio.get_running_loop()
        # Endpoints that share a URL (two keys for one gateway) share its reading and its
        # gate: the request keeps the one it picked, and one of the others stands for the rest.
        by_url: dict[str, Endpoint] = {picked.url: picked}
        for endpoint in self.endpoints.others(picked, self.replicas.allows(model)):
            by_url.setdefault(endpoint.url, endpoint)
        others = [e for url, e in by_url.items() if url != picked.url]

        def reader(endpoint: Endpoint) -> MetricsFetch:
            # One reading per machine, shared by its tasks (http.readings).
            return shared(
                endpoint.url, lambda limit: self._metrics(endpoint, limit), route=gate.route
            )

        also = [(e.url, reader(e)) for e in others]
        wait = gate.wait(picked.url, reader(picked), deadline - loop.time(), also)
        if not self.replicas.active:
            return by_url[await wait]
        waiter = asyncio.ensure_future(wait)
        try:
            while True:
                moved = asyncio.ensure_future(self.replicas.moved.wait())
                try:
                    await asyncio.wait((waiter, moved), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    moved.cancel()
                if waiter.done():
                    return by_url[waiter.result()]
                if not self._still_serves(picked, model):
                    return None
        finally:
            if not waiter.done():
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)

    # -- obey ---------------------------------------------------------------------------------

    def obey(
        self, verdict: Verdict, place: Place, prefer: Sequence[Endpoint], answer: bytes | None
    ) -> Sequence[Endpoint]:
        """An attempt at ``place`` ended with ``verdict`` (``answer``: the body where there
        was one): the place is free, the budgets count the answer's usage (a 200's; nothing
        for any other), and the verdict acts on the limit (a 200's latency, or backing off)
        and the endpoints (a down server's answer counts towards its rest; any other says it
        is up; a rate-limited or shed request tries the other endpoints first). The endpoints
        the request prefers next."""
        endpoint, limit = place.endpoint, place.limit
        answered = verdict.next is Next.ANSWER
        self._release(endpoint, limit)
        if self.budget.active:
            used = None  # an answer that is not a 200 spent nothing
            if answered and answer is not None:
                used = used_tokens(answer) or place.tokens
            self.budget.release(endpoint, place.tokens, used)
        if answered:
            limit.on_success(time.perf_counter() - place.started)
            self.endpoints.succeeded(endpoint)
            return prefer
        if verdict.back_off:
            limit.on_overload()
        if verdict.rest:
            self.endpoints.failed(endpoint)  # its retry tries the next endpoint first
            return [*(e for e in prefer if e != endpoint), *(e for e in prefer if e == endpoint)]
        self.endpoints.succeeded(endpoint)
        order = list(self.endpoints.endpoints)
        if not verdict.elsewhere_first or endpoint not in order:
            return prefer
        # A key whose limit is spent at one gateway of several, or one busy replica, would
        # otherwise hold its rows there until requestDeadline while the others have room.
        at = order.index(endpoint)
        return [*order[at + 1 :], *order[:at], endpoint]

    def refused(self, exc: BodyRefused, place: Place, attempt: int) -> Outcome:
        """A body not read (over maxResponseBytes, or not decodable): the server answered, so
        it is not down, and the same request would get the same answer: no retry."""
        if self.budget.active:
            self.budget.release(place.endpoint, place.tokens, None)
        self._release(place.endpoint, place.limit)
        self.endpoints.succeeded(place.endpoint)
        return Outcome(error=body_error(exc, attempt))

    def _release(self, endpoint: Endpoint, limit: AdaptiveLimit) -> None:
        """A request to ``endpoint`` ended (answered or not): its places are free."""
        limit.release()
        if self.gate is not None:
            self.gate.ended(endpoint.url)

    # -- replicas -----------------------------------------------------------------------------

    def _replaced(self, endpoints: tuple[Endpoint, ...]) -> None:
        """Replicas came or went: the endpoints take them, the client is told."""
        self.endpoints.replace(endpoints)
        self.secrets += [e.credentials for e in endpoints if e.credentials not in self.secrets]
        self._changed(endpoints)

    async def misrouted(
        self, endpoint: Endpoint, model: str | None, status: int, body: bytes, attempt: int
    ) -> bool:
        """Whether ``endpoint`` answered that it does not serve ``model`` (a 404 naming it)
        and the request is tried again (attempts left, and another endpoint may serve it: a
        lone gateway that does not know the model gets one request per prompt): the pool then
        routes by model, and sends no request for it there until its ``/v1/models`` lists it
        again."""
        if model is None or not model_not_found(status, body):
            return False
        await self.replicas.activate()
        self.replicas.not_serving(endpoint, model)
        allowed = self.replicas.allows(model)
        elsewhere = allowed is None or any(allowed(e) for e in self.replicas.endpoints)
        return attempt < self.config.max_attempts and elsewhere  # not to the same one again

    def unserved(self, model: str | None, error: RowError | None, attempt: int) -> Outcome:
        """No endpoint served ``model`` until the prompt's deadline: ``model_unavailable``."""
        return Outcome(
            error=model_unavailable_error(
                model or "",
                served=self.replicas.describe(model or ""),
                deadline=self.config.request_deadline,
                last=error,
                attempts=attempt,
                secrets=self.secrets,
            )
        )
