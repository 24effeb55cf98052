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
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import httpx

from dspark_json.errors import OptionError
from dspark_json.http.concurrency import AdaptiveLimit
from dspark_json.http.endpoints import Endpoint, EndpointPool, NoEndpoint
from dspark_json.http.failures import (
    body_error,
    held_error,
    http_error,
    invalid_utf8_error,
    no_endpoint_error,
    transport_error,
)
from dspark_json.http.gauges import Gate
from dspark_json.http.options import CHAT_COMPLETIONS, HttpOptions
from dspark_json.http.order import plan
from dspark_json.http.retry import (
    DOWN_STATUSES,
    RETRY_STATUSES,
    backoff,
    retry_after,
)
from dspark_json.http.secrets import Secret
from dspark_json.http.transport import BodyRefused, StreamTransport, read_body
from dspark_json.records import ClientStats, Fetched, Outcome, Outcomes
from dspark_json.rows import RowError

__all__ = ["auth_headers", "complete_all"]

logger = logging.getLogger("dspark_json")


@dataclass
class _Tally:
    """What the client counts while it runs; frozen into a :class:`ClientStats` at the end."""

    requests: int = 0
    retries: int = 0
    failed: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)


def auth_headers(api_key: Secret | None, endpoint: Endpoint) -> dict[str, str]:
    """``Authorization``: the Bearer key, else Basic from the endpoint URL's ``user:pass``."""
    if api_key is not None:
        return {"authorization": f"Bearer {api_key.reveal()}"}
    if endpoint.credentials is not None:
        token = base64.b64encode(endpoint.credentials.reveal().encode("utf-8")).decode("ascii")
        return {"authorization": f"Basic {token}"}
    return {}


def _proxy_for(url: str) -> str | None:
    """The proxy the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY) sets for ``url``."""
    host = urlsplit(url).hostname or ""
    if proxy_bypass(host):
        return None
    return getproxies().get(urlsplit(url).scheme)


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
        self.secrets = [api_key, *(e.credentials for e in config.endpoints)]
        self.headers = {
            e: {"content-type": "application/json", **auth_headers(api_key, e)}
            for e in config.endpoints
        }
        # Parsed once: httpx parses a URL given as text on every request.
        self.urls = {e: httpx.URL(e.url + CHAT_COMPLETIONS) for e in config.endpoints}
        self.health_urls = {e: httpx.URL(e.url + "/health") for e in config.endpoints}
        self.results = [Outcome()] * len(payloads)
        self.stats = _Tally()
        self.stopped = False
        # Option maxServerQueue: new requests wait while an endpoint's /metrics says it is full.
        limit = config.max_server_queue
        self.gate = Gate(limit, None) if limit is not None else None

    async def run(self) -> Fetched:
        pending = [i for i, payload in enumerate(self.payloads) if payload is not None]
        self.rankings: Mapping[int, Sequence[Endpoint]] = {}
        if self.config.prefix_order:
            sent = plan(self.payloads, self.config.endpoints)
            pending, self.rankings = sent.order, sent.rankings
        queue = iter(pending)
        self.limit = AdaptiveLimit(
            self.config.initial_concurrency,
            self.config.max_concurrency,
            adaptive=self.config.adaptive_concurrency,
        )
        # Loading the CA bundle is costly: once per partition, not per worker, and only
        # where an endpoint speaks https.
        secure = any(e.url.startswith("https://") for e in self.config.endpoints)
        self.ssl_context = httpx.create_ssl_context() if secure else None
        probes = self._transport()
        self.started = 0
        self.pool = EndpointPool(
            self.config.endpoints,
            lambda e: self._probe(probes, e),
            deadline=self.config.request_deadline,
            backlog=lambda: len(pending) - self.started,
        )
        try:
            workers = min(self.config.max_concurrency, len(pending))
            await asyncio.gather(*(self._worker(queue) for _ in range(workers)))
        finally:
            await self.pool.close()
            if probes is not self.injected:
                await probes.aclose()
        tally = self.stats
        stats = ClientStats(
            requests=tally.requests,
            retries=tally.retries,
            failed=tally.failed,
            statuses=dict(tally.statuses),
            latencies=tuple(tally.latencies),
            limit_peak=self.limit.peak,
            limit_lowest=self.limit.lowest,
            limit_final=int(self.limit.limit),
            endpoint_rests=self.pool.rests,
            held_s=self.gate.held_s if self.gate is not None else 0.0,
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
        proxy = _proxy_for(self.config.endpoints[0].url)
        if proxy is None:
            return StreamTransport(self.ssl_context, max_body=self.config.max_response_bytes)
        n = len(self.config.endpoints)
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
    ) -> tuple[int, bytes, httpx.Headers]:
        request = httpx.Request(
            method, url, content=content, headers=headers, extensions={"timeout": timeouts or {}}
        )
        response = await transport.handle_async_request(request)
        try:
            body = await read_body(response, request, self.config.max_response_bytes)
        finally:
            await response.aclose()
        return response.status_code, body, response.headers

    async def _probe(self, transport: httpx.AsyncBaseTransport, endpoint: Endpoint) -> bool:
        timeouts: dict[str, float | None] = dict.fromkeys(("connect", "read", "write", "pool"), 5.0)
        try:
            async with asyncio.timeout(10):
                status, _, _ = await self._request(
                    transport,
                    "GET",
                    self.health_urls[endpoint],
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
                self.results[index] = outcome = await self._send(transport, payload, prefer)
                if outcome.error is not None:
                    self.stats.failed += 1
                    self.stopped = self.stop_on_failure
        finally:
            if transport is not self.injected:
                await transport.aclose()

    def _down(self, endpoint: Endpoint, prefer: Sequence[Endpoint]) -> Sequence[Endpoint]:
        """``endpoint`` failed a request as a down server does: counted by the pool, and put
        last in the request's ``prefer``, so that its retry tries the next endpoint first."""
        self.pool.failed(endpoint)
        return [*(e for e in prefer if e != endpoint), *(e for e in prefer if e == endpoint)]

    def _refused(self, exc: BodyRefused, endpoint: Endpoint, attempt: int) -> Outcome:
        """A body not read (over maxResponseBytes, or not decodable): the server answered, so
        it is not down, and the same request would get the same answer: no retry."""
        self._release(endpoint)
        self.pool.succeeded(endpoint)
        error = body_error(exc, attempt)
        self.stats.statuses[error["type"]] += 1
        return Outcome(error=error)

    async def _admit(
        self, endpoint: Endpoint, deadline: float, error: RowError | None, attempt: int
    ) -> Outcome | None:
        """A place for a new request to ``endpoint``: room on the server (option
        maxServerQueue: :class:`~dspark_json.http.gauges.Gate`), then in the in-flight limit.
        The outcome of the prompt where a hold at the gate spent its ``deadline`` (loop time):
        nothing is sent then."""
        loop = asyncio.get_running_loop()
        if self.gate is not None:
            await self.gate.wait(endpoint.url, self.headers[endpoint], deadline - loop.time())
        await self.limit.acquire()
        if self.gate is not None:
            self.gate.sent(endpoint.url)
        if self.gate is None or loop.time() < deadline:
            return None
        self._release(endpoint)
        return Outcome(error=error or held_error(self.config.request_deadline, attempt - 1))

    def _release(self, endpoint: Endpoint) -> None:
        """A request to ``endpoint`` ended (answered or not): its places are free."""
        self.limit.release()
        if self.gate is not None:
            self.gate.ended(endpoint.url)

    async def _send(
        self, transport: httpx.AsyncBaseTransport, payload: bytes, prefer: Sequence[Endpoint]
    ) -> Outcome:
        # One request, retried as http.retry says; to the first endpoint of ``prefer`` that
        # does not rest (one that failed it goes last for its retries), else round-robin.
        config, limit, pool, stats = self.config, self.limit, self.pool, self.stats
        loop = asyncio.get_running_loop()
        deadline = loop.time() + config.request_deadline
        error: RowError | None = None
        attempt = 0
        while True:
            left = deadline - loop.time()
            try:
                endpoint = await pool.pick(left, prefer)
            except NoEndpoint:
                return Outcome(
                    error=no_endpoint_error(
                        (e.url for e in config.endpoints),
                        config.request_deadline,
                        error,
                        attempt,
                        self.secrets,
                    )
                )
            attempt += 1
            wait_hint: float | None = None
            if (held := await self._admit(endpoint, deadline, error, attempt)) is not None:
                return held
            stats.requests += 1
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
                return self._refused(exc, endpoint, attempt)
            except (httpx.TransportError, TimeoutError) as exc:
                self._release(endpoint)
                limit.on_overload()
                prefer = self._down(endpoint, prefer)
                error = transport_error(exc, attempt, config.request_timeout, self.secrets)
                stats.statuses[error["type"]] += 1
                retry = True
            else:
                self._release(endpoint)
                stats.statuses[str(status)] += 1
                if status == 200:
                    limit.on_success(time.perf_counter() - started)
                    stats.latencies.append(time.perf_counter() - started)
                    pool.succeeded(endpoint)
                    return _answered(body, attempt)
                if status in RETRY_STATUSES:
                    limit.on_overload()
                if status in DOWN_STATUSES:
                    prefer = self._down(endpoint, prefer)
                else:
                    pool.succeeded(endpoint)
                error = http_error(status, body, attempt, self.secrets)
                retry = status in RETRY_STATUSES
                wait_hint = retry_after(headers)
            if not retry or attempt >= config.max_attempts:
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
