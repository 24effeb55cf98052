"""The HTTP side: chat completion requests to vLLM / OpenAI-compatible servers, with httpx.

vLLM never sheds load (its queue is unbounded), so the bound on requests in flight
(:class:`~dspark_json.http.concurrency.AdaptiveLimit`) and the deadlines live here. Every request
ends as exactly one :class:`Outcome`: the response body, or the error that stopped it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from dspark_json.errors import OptionError
from dspark_json.http.concurrency import AdaptiveLimit
from dspark_json.http.endpoints import PROBE_PATH, Endpoint, EndpointPool, NoEndpoint, NoServer
from dspark_json.http.failures import (
    body_error,
    budget_error,
    held_error,
    http_error,
    invalid_utf8_error,
    model_unavailable_error,
    no_endpoint_error,
    transport_error,
)
from dspark_json.http.gauges import Gate
from dspark_json.http.options import CHAT_COMPLETIONS, HttpOptions
from dspark_json.http.order import plan
from dspark_json.http.readings import shared
from dspark_json.http.replicas import Replicas, model_not_found, request_model
from dspark_json.http.retry import backoff, retry_hint
from dspark_json.http.secrets import Secret, redact
from dspark_json.http.tokens import TokenBudget, estimate, used_tokens
from dspark_json.http.transport import BodyRefused, StreamTransport, proxy_for, read_body
from dspark_json.http.verdicts import TRANSPORT, Next, Verdict, judge
from dspark_json.records import ClientStats, Fetched, Outcome, Outcomes, watch
from dspark_json.rows import RowError, status_of_error

__all__ = ["auth_headers", "complete_all"]

logger = logging.getLogger("dspark_json")


@dataclass
class _Tally:
    """What the client counts while it runs; frozen into a :class:`ClientStats` at the end."""

    requests: int = 0
    retries: int = 0
    failed: int = 0
    shed: int = 0  # answers that shed the request (http.verdicts): retried, not failed
    statuses: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    model_requests: Counter[str] = field(default_factory=Counter)
    model_latencies: dict[str, list[float]] = field(default_factory=dict)
    #: For the live progress (:mod:`dspark_json.progress`) only: requests ended, their rows'
    #: statuses where they failed, and the usage the answers carry (in, out, cached), by model
    #: too. The metrics record's figures come from the parsed rows.
    live: bool = False  # a progress record reads this tally (else the usage is not read)
    done: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    tokens: list[int] = field(default_factory=lambda: [0, 0, 0])
    model_tokens: dict[str, list[int]] = field(default_factory=dict)

    def sent(self, model: str | None) -> None:
        """An attempt sent (for ``model``, counted by model too)."""
        self.requests += 1
        if model is not None:
            self.model_requests[model] += 1

    def answered(self, model: str | None, seconds: float, body: bytes) -> None:
        """An attempt answered 200 after ``seconds`` with ``body`` (its usage counted)."""
        self.latencies.append(seconds)
        if model is not None:
            self.model_latencies.setdefault(model, []).append(seconds)
        if not self.live:
            return
        at = body.rfind(b'"usage"')  # one search and a few matches per answer, no decoding
        if at < 0:
            return
        by_model = None if model is None else self.model_tokens.setdefault(model, [0, 0, 0])
        for name, value in _USAGE.findall(body, at):
            self.tokens[_USAGE_INDEX[name]] += int(value)
            if by_model is not None:
                by_model[_USAGE_INDEX[name]] += int(value)

    def ended(self, outcome: Outcome) -> None:
        """A request ended (its outcome is the row's)."""
        self.done += 1
        if outcome.error is not None:
            self.failed += 1
            self.failures[status_of_error(outcome.error)] += 1


#: The usage counts in an answer's ``usage`` object, as the live progress reads them.
_USAGE = re.compile(rb'"(prompt_tokens|completion_tokens|cached_tokens)"\s*:\s*(\d+)')
_USAGE_INDEX = {b"prompt_tokens": 0, b"completion_tokens": 1, b"cached_tokens": 2}


def auth_headers(api_key: Secret | None, endpoint: Endpoint) -> dict[str, str]:
    """``Authorization``: the Bearer key, else Basic from the endpoint URL's ``user:pass``."""
    if api_key is not None:
        return {"authorization": f"Bearer {api_key.reveal()}"}
    if endpoint.credentials is not None:
        token = base64.b64encode(endpoint.credentials.reveal().encode("utf-8")).decode("ascii")
        return {"authorization": f"Basic {token}"}
    return {}


def complete_all(
    requests: Sequence[bytes | Mapping[str, Any] | None],
    config: HttpOptions,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    stop_on_failure: bool = False,
) -> Fetched:
    """Send every request (``None`` entries are skipped) and return outcomes in the same order.

    With ``stop_on_failure`` (FAILFAST) no new request starts after the first one that fails
    for good; the prompts not sent get no outcome body and no error.
    """
    api_key = config.key.resolve()
    if config.api_key_env is not None and api_key is None:
        raise OptionError(
            f"Option 'apiKeyEnv' names the environment variable {config.api_key_env!r}, which "
            "is not set where this task runs. Set it on every executor (e.g. "
            "spark.executorEnv.<NAME>), or drop the option if the server needs no key."
        )
    payloads = [
        None
        if r is None
        else r
        if isinstance(r, bytes)
        else json.dumps(r, ensure_ascii=False).encode("utf-8")
        for r in requests
    ]
    return asyncio.run(_Run(payloads, config, api_key, transport, stop_on_failure).run())


def _priority_of(payloads: Sequence[bytes | None]) -> int | None:
    """The ``priority`` of the requests (option priority: every body has the same), read from
    the first; ``None`` where it has none, or 0 (every request's default)."""
    first = next((p for p in payloads if p is not None), None)
    if first is None or b'"priority"' not in first:
        return None
    try:
        body = json.loads(first)
    except ValueError:
        return None
    value = body.get("priority") if isinstance(body, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value else None


def _answered(body: bytes, attempts: int) -> Outcome:
    """A 200 answer's outcome: its text; a body that is not UTF-8 keeps its bytes (each
    invalid one as ``\\xNN``) with an ``invalid_utf8`` error, never U+FFFD in silence."""
    try:
        return Outcome(body=body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return Outcome(
            body=body.decode("utf-8", errors="backslashreplace"),
            error=invalid_utf8_error(exc, attempts),
        )


class _ByEndpoint(dict[Endpoint, Any]):
    """What the client keeps per endpoint, made on first use by ``make``."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, endpoint: Endpoint) -> Any:
        value = self[endpoint] = self._make(endpoint)
        return value


class _Run:
    """One partition's requests: workers with their own keep-alive connections pull prompts
    from a shared queue; the adaptive limit decides how many of them send at once."""

    def __init__(
        self,
        payloads: list[bytes | None],
        config: HttpOptions,
        api_key: Secret | None,
        transport: httpx.AsyncBaseTransport | None,
        stop_on_failure: bool,
    ) -> None:
        self.payloads = payloads
        self.config = config
        self.injected = transport
        read = config.read_timeout if config.read_timeout is not None else config.request_timeout
        self.timeouts: dict[str, float | None] = {
            "connect": config.connect_timeout,
            "read": read,
            "write": read,
            "pool": None,
        }
        self.stop_on_failure = stop_on_failure
        self.secrets = [
            api_key,
            *(e.credentials for e in config.endpoints),
            *config.request_headers.secrets(),
        ]
        # By endpoint, made when an endpoint is first used (replicas come and go); a URL is
        # parsed once: httpx parses a URL given as text on every request.
        self.headers = _ByEndpoint(
            lambda e: {
                **config.request_headers.sent(),  # option requestHeaders (none of ours)
                "content-type": "application/json",
                **auth_headers(api_key, e),
                **({"host": e.host} if e.host is not None else {}),
            }
        )
        self.urls = _ByEndpoint(lambda e: httpx.URL(e.url + CHAT_COMPLETIONS))
        self.probe_urls = _ByEndpoint(lambda e: httpx.URL(e.url + PROBE_PATH))
        self.results = [Outcome()] * len(payloads)
        self.stats = _Tally()
        # The task's live progress, where it has one, reads the tally, the gate and the limits.
        self.stats.live = watch(self)
        self.stopped = False
        # Option maxServerQueue: new requests wait while an endpoint's /metrics says it is full.
        limit = config.max_server_queue
        self.gate = Gate(limit) if limit is not None else None
        # Options maxTokensPerMinute, maxTokensInFlight: http.tokens.
        self.budget = TokenBudget(config.max_tokens_per_minute, config.max_tokens_in_flight)

    async def run(self) -> Fetched:
        pending = [i for i, payload in enumerate(self.payloads) if payload is not None]
        self.rankings: Mapping[int, Sequence[Endpoint]] = {}
        if self.config.prefix_order:
            sent = plan(self.payloads, self.config.endpoints)
            pending, self.rankings = sent.order, sent.rankings
        queue = iter(pending)
        self.limits: dict[tuple[Endpoint, str | None], AdaptiveLimit] = {}  # by model
        self.limit = AdaptiveLimit(
            self.config.initial_concurrency,
            self.config.max_concurrency,
            adaptive=self.config.adaptive_concurrency,
        )
        # Loading the CA bundle is costly: once per partition, not per worker, and only
        # where an endpoint speaks https.
        secure = self.config.endpoints_file is not None or any(
            e.url.startswith("https://") for e in self.config.endpoints
        )  # the file's replicas may speak https
        self.ssl_context = httpx.create_ssl_context() if secure else None
        self.probes = probes = self._transport()
        self.started = 0
        self.pool = EndpointPool(
            self.config.endpoints,
            lambda e: self._probe(probes, e),
            deadline=self.config.request_deadline,
            backlog=lambda: len(pending) - self.started,
        )
        # Options endpointsFile, resolveEndpoints, several models: http.replicas.
        self.models = [None if p is None else request_model(p) for p in self.payloads]
        # Option priority: a replica that appears is asked whether it schedules by it first.
        self.priority = _priority_of(self.payloads)
        self.replicas = Replicas(
            self.config,
            lambda e, path: self._get(probes, e, path),
            self._replicas_changed,
            admit=self._schedules_priority if self.priority else None,
        )
        try:
            await self.replicas.start(self.models)
            workers = min(self.config.max_concurrency, len(pending))
            await asyncio.gather(*(self._worker(queue) for _ in range(workers)))
        finally:
            if self.gate is not None:  # its share of the pools' room goes to the other tasks
                self.gate.close()
            await self.replicas.close()
            await self.pool.close()
            if probes is not self.injected:
                await probes.aclose()
        tally = self.stats
        limits = list(self.limits.values()) or [self.limit]
        stats = ClientStats(
            requests=tally.requests,
            retries=tally.retries,
            failed=tally.failed,
            statuses=dict(tally.statuses),
            latencies=tuple(tally.latencies),
            limit_peak=max(x.peak for x in limits),
            limit_lowest=min(x.lowest for x in limits),
            limit_final=max(int(x.limit) for x in limits),
            endpoint_rests=self.pool.rests,
            model_requests=dict(tally.model_requests),
            model_latencies={m: tuple(v) for m, v in tally.model_latencies.items()},
            held_s=(self.gate.held_s if self.gate is not None else 0.0) + self.budget.waited_s,
            shed=tally.shed,
        )
        return Fetched(outcomes=Outcomes.of(self.results), stats=stats)

    def _transport(self) -> httpx.AsyncBaseTransport:
        """A worker's connections: one keep-alive connection per endpoint.

        Requests go to a transport directly, not through an ``httpx.AsyncClient``: the client's
        URL merging, cookie jar, auth and redirect layers cost about a third of the CPU per
        request, and none of them applies here. The transport is our lean HTTP/1.1 one
        (:mod:`dspark_json.http.transport`), or httpx's default where the environment sets a proxy.
        """
        if self.injected is not None:
            return self.injected
        given = self.config.endpoints  # none where option endpointsFile alone names them
        proxy = proxy_for(given[0].url) if given else None
        if proxy is None:
            return StreamTransport(self.ssl_context, max_body=self.config.max_response_bytes)
        n = max(1, len(self.config.endpoints))
        return httpx.AsyncHTTPTransport(
            verify=self.ssl_context or True,
            # A shared pool of N connections costs O(N) bookkeeping per request in httpcore
            # (measured: 105 req/s at 32 vs 352 at 1): one connection per endpoint per worker.
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
            proxy=proxy,
        )

    async def _request(
        self,
        transport: httpx.AsyncBaseTransport,
        method: str,
        url: httpx.URL,
        headers: dict[str, str],
        *,
        content: bytes | None = None,
        timeouts: dict[str, float | None] | None = None,
        limit: int | None = None,
    ) -> tuple[int, bytes, httpx.Headers]:
        extensions: dict[str, Any] = {"timeout": timeouts or {}}
        if "host" in headers:  # an address a name resolved to: TLS checks the name
            extensions["sni_hostname"] = headers["host"].rsplit(":", 1)[0]
        request = httpx.Request(
            method, url, content=content, headers=headers, extensions=extensions
        )
        response = await transport.handle_async_request(request)
        try:
            body = await read_body(response, request, limit or self.config.max_response_bytes)
        finally:
            await response.aclose()
        return response.status_code, body, response.headers

    def _replicas_changed(self, endpoints: tuple[Endpoint, ...]) -> None:
        """Replicas came or went: the pool takes them; the send plan's endpoint preferences
        (prefixOrder) are made again over them, for the requests not yet sent."""
        self.pool.replace(endpoints)
        self.secrets += [e.credentials for e in endpoints if e.credentials not in self.secrets]
        if self.config.prefix_order:  # replicas that came: their share of the prefixes
            self.rankings = plan(self.payloads, endpoints).rankings

    async def _get(
        self, transport: httpx.AsyncBaseTransport, endpoint: Endpoint, path: str
    ) -> tuple[int, bytes]:
        """A GET of ``path`` on ``endpoint`` (its ``/v1/models``), within 5 s per phase."""
        timeouts: dict[str, float | None] = dict.fromkeys(("connect", "read", "write", "pool"), 5.0)
        headers = {k: v for k, v in self.headers[endpoint].items() if k != "content-type"}
        status, body, _ = await self._request(
            transport, "GET", httpx.URL(endpoint.url + path), headers, timeouts=timeouts
        )
        return status, body

    async def _metrics(self, endpoint: Endpoint, limit: int) -> tuple[int, bytes]:
        """A GET of ``endpoint``'s /metrics for the gate (option maxServerQueue), through the
        transport and with the TLS server name and headers of its requests, the body held to
        ``limit`` bytes."""
        timeouts: dict[str, float | None] = dict.fromkeys(("connect", "read", "write", "pool"), 2.0)
        headers = {k: v for k, v in self.headers[endpoint].items() if k != "content-type"}
        status, body, _ = await self._request(
            self.probes,
            "GET",
            httpx.URL(endpoint.url + "/metrics"),
            headers,
            timeouts=timeouts,
            limit=limit,
        )
        return status, body

    async def _schedules_priority(self, endpoint: Endpoint, models: frozenset[str] | None) -> bool:
        """Option ``priority``, on a replica that appeared while the task runs (of option
        endpointsFile, or an address a name resolved to), before its first request: one
        completion of one token with the priority, as ``.load()`` asks of the endpoints it
        knows (:func:`~dspark_json.http.preflight.check_priority`). A replica that answers
        vLLM's 400 (no priority scheduling) or does not answer gets no request (a WARN; asked
        again at the next look)."""
        model = next(
            (m for m in self.models if m is not None and (models is None or m in models)),
            min(models) if models else None,
        )
        body = {
            "model": model,
            "messages": [{"role": "user", "content": "ping"}],
            "max_tokens": 1,
            "priority": self.priority,
        }
        try:
            async with asyncio.timeout(min(60.0, self.config.request_timeout)):
                status, answer, _ = await self._request(
                    self.probes,
                    "POST",
                    self.urls[endpoint],
                    self.headers[endpoint],
                    content=json.dumps(body).encode("utf-8"),
                    timeouts=self.timeouts,
                )
        except (httpx.HTTPError, TimeoutError) as exc:
            logger.warning(
                "Replica %s did not answer the priority check (%s); no request goes to it "
                "until it does.",
                endpoint.url,
                type(exc).__name__,
            )
            return False
        if status == 400 and b"riority" in answer[:4096]:
            logger.warning(
                "Replica %s does not schedule by priority (option priority=%d; HTTP 400 "
                "%s); no request goes to it. Start it with --scheduling-policy priority.",
                endpoint.url,
                self.priority,
                redact(answer[:200].decode("utf-8", errors="replace"), self.secrets),
            )
            return False
        return True

    async def _probe(self, transport: httpx.AsyncBaseTransport, endpoint: Endpoint) -> bool:
        timeouts: dict[str, float | None] = dict.fromkeys(("connect", "read", "write", "pool"), 5.0)
        try:
            async with asyncio.timeout(10):
                status, _, _ = await self._request(
                    transport,
                    "GET",
                    self.probe_urls[endpoint],
                    self.headers[endpoint],
                    timeouts=timeouts,
                )
        except (httpx.HTTPError, TimeoutError):
            return False
        return status < 500

    async def _worker(self, queue: Any) -> None:
        transport = self._transport()
        try:
            for index in queue:
                if self.stopped:
                    break
                payload = self.payloads[index]
                assert payload is not None
                self.started += 1
                prefer = self.rankings.get(index, ())
                self.results[index] = outcome = await self._send(
                    transport, payload, prefer, self.models[index]
                )
                self.stats.ended(outcome)
                if outcome.error is not None:
                    self.stopped = self.stop_on_failure
        finally:
            if transport is not self.injected:
                await transport.aclose()

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
            config = self.config
            limit = self.limits[key] = AdaptiveLimit(
                config.initial_concurrency,
                config.max_concurrency,
                adaptive=config.adaptive_concurrency,
            )
        return limit

    def _still_serves(self, endpoint: Endpoint, model: str | None) -> bool:
        """Whether ``endpoint`` is still one of the pool's and, where the client routes by
        model, still serves ``model`` (a request waited for its place meanwhile)."""
        if not self.replicas.active:
            return True
        allowed = self.replicas.allows(model)
        return endpoint in self.replicas.endpoints and (allowed is None or allowed(endpoint))

    def _down(self, endpoint: Endpoint, prefer: Sequence[Endpoint]) -> Sequence[Endpoint]:
        """``endpoint`` failed a request as a down server does: counted by the pool, and put
        last in the request's ``prefer``, so that its retry tries the next endpoint first."""
        self.pool.failed(endpoint)
        return [*(e for e in prefer if e != endpoint), *(e for e in prefer if e == endpoint)]

    def _up(
        self, endpoint: Endpoint, prefer: Sequence[Endpoint], *, throttled: bool
    ) -> Sequence[Endpoint]:
        """``endpoint`` answered as a server that is up (counted so by the pool). Where it
        rate-limited the request, the retry tries the pool's other endpoints first, from the
        one after it, ``endpoint`` last: a key whose limit is spent at one gateway of several,
        or one busy replica, would otherwise hold its rows there until requestDeadline while
        the others have room."""
        self.pool.succeeded(endpoint)
        order = list(self.pool.endpoints)
        if not throttled or endpoint not in order:
            return prefer
        at = order.index(endpoint)
        return [*order[at + 1 :], *order[:at], endpoint]

    async def _budgeted(self, endpoint: Endpoint, tokens: int, deadline: float) -> bool:
        """Room for ``tokens`` in the token budgets (options maxTokensPerMinute,
        maxTokensInFlight), waited for until ``deadline``; True at once without them."""
        return not self.budget.active or await self.budget.acquire(endpoint, tokens, deadline)

    def _spent(self, endpoint: Endpoint, tokens: int, answer: bytes | None) -> None:
        """A request counted with ``tokens`` ended: a 200 ``answer`` spent its usage (else
        the estimate); an answer that is not one, or none, spent nothing."""
        if self.budget.active:
            used = (used_tokens(answer) or tokens) if answer is not None else None
            self.budget.release(endpoint, tokens, used)

    def _obey(
        self, verdict: Verdict, endpoint: Endpoint, prefer: Sequence[Endpoint], limit: AdaptiveLimit
    ) -> Sequence[Endpoint]:
        """What ``verdict`` does to the in-flight limit and the pool: the limit backs off; a
        down server's answer counts towards its rest (:meth:`_down`), any other says it is up
        (:meth:`_up`; a rate-limited or shed request tries the other endpoints first). The
        endpoints the request prefers next."""
        if verdict.back_off:
            limit.on_overload()
        if verdict.rest:
            return self._down(endpoint, prefer)
        return self._up(endpoint, prefer, throttled=verdict.elsewhere_first)

    def _refused(
        self, exc: BodyRefused, endpoint: Endpoint, attempt: int, limit: AdaptiveLimit
    ) -> Outcome:
        """A body not read (over maxResponseBytes, or not decodable): the server answered, so
        it is not down, and the same request would get the same answer: no retry."""
        self._release(endpoint, limit)
        self.pool.succeeded(endpoint)
        error = body_error(exc, attempt)
        self.stats.statuses[error["type"]] += 1
        return Outcome(error=error)

    async def _admit(
        self,
        endpoint: Endpoint,
        limit: AdaptiveLimit,
        model: str | None,
        deadline: float,
        *,
        error: RowError | None,
        attempt: int,
    ) -> Outcome | bool:
        """A place for a new request to ``endpoint``: room on the server (option
        maxServerQueue: :class:`~dspark_json.http.gauges.Gate`), then in ``limit`` (the
        in-flight limit of the request's (endpoint, model) where the client routes by model).
        False where the endpoint left the pool or stopped serving ``model`` while the request
        waited at the gate (nothing taken: it picks again); the outcome of the prompt where a
        hold at the gate spent its ``deadline`` (loop time): nothing is sent then."""
        loop = asyncio.get_running_loop()
        if self.gate is not None and not await self._gate(endpoint, model, deadline):
            return False
        await limit.acquire()
        if self.gate is not None:
            self.gate.sent(endpoint.url)
        if self.gate is None or loop.time() < deadline:
            return True
        self._release(endpoint, limit)
        return Outcome(error=error or held_error(self.config.request_deadline, attempt - 1))

    async def _gate(self, endpoint: Endpoint, model: str | None, deadline: float) -> bool:
        """Wait at the gate for room at ``endpoint`` (until ``deadline`` at most); where the
        client routes by model, stop waiting (False) once the endpoint left the pool or
        stopped serving ``model``: a replica removed while saturated does not hold the
        request to its deadline."""
        assert self.gate is not None
        loop = asyncio.get_running_loop()
        # One reading per machine, shared by its tasks (http.readings).
        fetch = shared(endpoint.url, lambda limit: self._metrics(endpoint, limit))
        wait = self.gate.wait(endpoint.url, fetch, deadline - loop.time())
        if not self.replicas.active:
            await wait
            return True
        waiter = asyncio.ensure_future(wait)
        try:
            while True:
                moved = asyncio.ensure_future(self.replicas.moved.wait())
                try:
                    await asyncio.wait((waiter, moved), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    moved.cancel()
                if waiter.done():
                    waiter.result()
                    return True
                if not self._still_serves(endpoint, model):
                    return False
        finally:
            if not waiter.done():
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)

    def _release(self, endpoint: Endpoint, limit: AdaptiveLimit) -> None:
        """A request to ``endpoint`` ended (answered or not): its places are free."""
        limit.release()
        if self.gate is not None:
            self.gate.ended(endpoint.url)

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
                return await self.pool.pick(left, prefer, self.replicas.allows(model))
            except NoServer:
                if left <= 0:
                    return self._unserved(model, error, attempt)
                await self.replicas.wait_for(model or "", left)
            except NoEndpoint:
                return Outcome(
                    error=no_endpoint_error(
                        [e.url for e in self.pool.endpoints] or ["option endpointsFile lists none"],
                        self.config.request_deadline,
                        error,
                        attempt,
                        self.secrets,
                    )
                )

    async def _place(
        self,
        deadline: float,
        prefer: Sequence[Endpoint],
        model: str | None,
        error: RowError | None,
        attempt: int,
        *,
        tokens: int = 0,
    ) -> tuple[Endpoint, AdaptiveLimit] | Outcome:
        """The endpoint of a request's attempt number ``attempt`` and the in-flight limit it
        counts in, its place taken (:meth:`_admit`), then room for its ``tokens`` in the token
        budgets (:meth:`_budgeted`); the row's outcome where none comes before
        ``deadline``. A request that waited for its place while its replica left the pool or
        stopped serving its model picks again, within what is left of the deadline."""
        while True:
            picked = await self._endpoint(deadline, prefer, model, error, attempt - 1)
            if isinstance(picked, Outcome):
                return picked
            limit = self._limit_for(picked, model)
            admitted = await self._admit(
                picked, limit, model, deadline, error=error, attempt=attempt
            )
            if isinstance(admitted, Outcome):
                return admitted
            if admitted and self._still_serves(picked, model):
                if await self._budgeted(picked, tokens, deadline):
                    return picked, limit
                self._release(picked, limit)
                deadline_s = self.config.request_deadline
                return Outcome(error=error or budget_error(deadline_s, attempt - 1))
            if admitted:
                self._release(picked, limit)

    async def _misrouted(
        self, endpoint: Endpoint, model: str | None, status: int, body: bytes, attempt: int
    ) -> bool:
        """Whether ``endpoint`` answered that it does not serve ``model`` (a 404 naming it)
        and the request is tried again (attempts left, and another endpoint may serve it: a
        lone gateway that does not know the model gets one request per prompt): the client
        then routes by model, and sends no request for it there until its ``/v1/models``
        lists it again."""
        if model is None or not model_not_found(status, body):
            return False
        await self.replicas.activate()
        self.replicas.not_serving(endpoint, model)
        allowed = self.replicas.allows(model)
        elsewhere = allowed is None or any(allowed(e) for e in self.replicas.endpoints)
        if attempt >= self.config.max_attempts or not elsewhere:  # not to the same one again
            return False
        self.stats.retries += 1
        return True

    def _unserved(self, model: str | None, error: RowError | None, attempt: int) -> Outcome:
        """No endpoint served ``model`` until the prompt's deadline: ``model_unavailable``."""
        error = model_unavailable_error(
            model or "",
            served=self.replicas.describe(model or ""),
            deadline=self.config.request_deadline,
            last=error,
            attempts=attempt,
            secrets=self.secrets,
        )
        self.stats.statuses[error["type"]] += 1
        return Outcome(error=error)

    async def _send(
        self,
        transport: httpx.AsyncBaseTransport,
        payload: bytes,
        prefer: Sequence[Endpoint],
        model: str | None = None,
    ) -> Outcome:
        # One request, retried as http.retry says; to the first endpoint of ``prefer`` that
        # does not rest (one that failed it goes last for its retries), else round-robin.
        config, pool, stats = self.config, self.pool, self.stats
        loop, attempt = asyncio.get_running_loop(), 0
        deadline = loop.time() + config.request_deadline
        error: RowError | None = None
        throttled = 0  # attempts answered with a rate limit: not counted against maxAttempts
        tokens = estimate(payload) if self.budget.active else 0
        while True:
            placed = await self._place(deadline, prefer, model, error, attempt + 1, tokens=tokens)
            if isinstance(placed, Outcome):
                return placed
            (endpoint, limit), attempt = placed, attempt + 1
            wait_hint: float | None = None
            stats.sent(model)
            started = time.perf_counter()
            try:  # what a hold at the gate left of the deadline bounds the attempt
                async with asyncio.timeout(
                    min(config.request_timeout, max(deadline - loop.time(), 0.001))
                ):
                    status, body, headers = await self._request(
                        transport,
                        "POST",
                        self.urls[endpoint],
                        self.headers[endpoint],
                        content=payload,
                        timeouts=self.timeouts,
                    )
            except BodyRefused as exc:
                self._spent(endpoint, tokens, None)
                return self._refused(exc, endpoint, attempt, limit)
            except (httpx.TransportError, TimeoutError) as exc:
                self._spent(endpoint, tokens, None)
                self._release(endpoint, limit)
                prefer = self._obey(TRANSPORT, endpoint, prefer, limit)
                error = transport_error(exc, attempt, config.request_timeout, self.secrets)
                stats.statuses[error["type"]] += 1
                retry = TRANSPORT.next is Next.RETRY
            else:
                self._release(endpoint, limit)
                stats.statuses[str(status)] += 1
                verdict = judge(status, headers, body)
                self._spent(endpoint, tokens, body if verdict.next is Next.ANSWER else None)
                if verdict.next is Next.ANSWER:
                    limit.on_success(time.perf_counter() - started)
                    stats.answered(model, time.perf_counter() - started, body)
                    pool.succeeded(endpoint)
                    return _answered(body, attempt)
                prefer = self._obey(verdict, endpoint, prefer, limit)
                error = http_error(status, body, attempt, self.secrets)
                if verdict.next is Next.REROUTE and await self._misrouted(
                    endpoint, model, status, body, attempt
                ):
                    continue  # at once, to a replica that serves the model
                later = verdict.next is Next.LATER
                retry = later or verdict.next is Next.RETRY
                stats.shed += verdict.shed
                wait_hint, throttled = retry_hint(headers, later), throttled + later
            if not retry or attempt - throttled >= config.max_attempts:
                return Outcome(error=error)
            delay = wait_hint if wait_hint is not None else backoff(attempt)
            if loop.time() + delay >= deadline:
                error["message"] += (
                    f" (gave up: the next attempt would start after requestDeadline="
                    f"{config.request_deadline:g}s)"
                )
                return Outcome(error=error)
            stats.retries += 1
            logger.debug("Retrying after %s (attempt %d) in %.2fs", error["type"], attempt, delay)
            await asyncio.sleep(delay)
