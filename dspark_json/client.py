"""The HTTP side: chat completion requests to vLLM / OpenAI-compatible servers, with httpx.

vLLM never sheds load (its queue is unbounded), so the bound on requests in flight
(:class:`~dspark_json.limits.AdaptiveLimit`) and the deadlines live here. Every request ends as
exactly one :class:`Outcome`: the response body, or the error that stopped it.
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
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import httpx

from dspark_json.endpoints import Endpoint, EndpointPool, NoEndpoint
from dspark_json.errors import OptionError
from dspark_json.limits import AdaptiveLimit
from dspark_json.retry import backoff, http_error, retry_after, transport_error
from dspark_json.secrets import ApiKey, Secret, redact
from dspark_json.transport import StreamTransport

if TYPE_CHECKING:
    from dspark_json.options import Options

__all__ = [
    "RETRY_STATUSES",
    "ClientConfig",
    "ClientStats",
    "Fetched",
    "Outcome",
    "auth_headers",
    "complete_all",
]

logger = logging.getLogger("dspark_json")

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: Statuses that say the server is overloaded: the in-flight limit backs off.
_OVERLOAD = frozenset({408, 429, 500, 502, 503, 504})
#: Statuses that say this endpoint is down (with connection errors and timeouts).
_DOWN = frozenset({502, 503, 504})


@dataclass(frozen=True)
class ClientConfig:
    """How to talk to the servers: where, how many requests at once, how long, how often."""

    endpoints: tuple[Endpoint, ...]
    api_key: ApiKey = field(default_factory=ApiKey)
    max_concurrency: int = 32
    initial_concurrency: int = 8
    adaptive: bool = True
    connect_timeout: float = 10.0
    read_timeout: float | None = None
    request_timeout: float = 300.0
    deadline: float = 900.0
    max_attempts: int = 5
    path: str = "/v1/chat/completions"

    @classmethod
    def from_options(cls, options: Options) -> ClientConfig:
        return cls(
            endpoints=options.endpoints,
            api_key=options.key,
            max_concurrency=options.max_concurrency,
            initial_concurrency=options.initial_concurrency,
            adaptive=options.adaptive_concurrency,
            connect_timeout=options.connect_timeout,
            read_timeout=options.read_timeout,
            request_timeout=options.request_timeout,
            deadline=options.request_deadline,
            max_attempts=options.max_attempts,
        )


@dataclass(frozen=True)
class Outcome:
    """The result of one request: a response body, or an error record for the ``_error`` column."""

    body: str | None
    error: dict[str, Any] | None = None


@dataclass
class ClientStats:
    """What one call of :func:`complete_all` did (the metrics of a partition)."""

    requests: int = 0  # HTTP attempts sent
    retries: int = 0
    failed: int = 0  # prompts that ended with an error
    statuses: Counter[str] = field(default_factory=Counter)  # "200", "429", "timeout", ...
    latencies: list[float] = field(default_factory=list)  # of successful attempts, seconds
    limit_peak: int = 0
    limit_lowest: int = 0
    limit_final: int = 0
    endpoint_rests: int = 0

    def latency(self, q: float) -> float | None:
        """The ``q`` quantile (0-1) of the successful attempts' latency, in seconds."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Fetched:
    outcomes: list[Outcome]
    stats: ClientStats


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
    config: ClientConfig,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    stop_on_failure: bool = False,
) -> Fetched:
    """Send every request (``None`` entries are skipped) and return outcomes in the same order.

    With ``stop_on_failure`` (FAILFAST) no new request starts after the first one that fails
    for good; the prompts not sent get no outcome body and no error.
    """
    api_key = config.api_key.resolve()
    if config.api_key.env is not None and api_key is None:
        raise OptionError(
            f"Option 'apiKeyEnv' names the environment variable {config.api_key.env!r}, which "
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


class _Run:
    """One partition's requests: workers with their own keep-alive connections pull prompts
    from a shared queue; the adaptive limit decides how many of them send at once."""

    def __init__(
        self,
        payloads: list[bytes | None],
        config: ClientConfig,
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
        self.urls = {e: httpx.URL(e.url + config.path) for e in config.endpoints}
        self.health_urls = {e: httpx.URL(e.url + "/health") for e in config.endpoints}
        self.results = [Outcome(None)] * len(payloads)
        self.stats = ClientStats()
        self.stopped = False

    async def run(self) -> Fetched:
        pending = [i for i, payload in enumerate(self.payloads) if payload is not None]
        queue = iter(pending)
        self.limit = AdaptiveLimit(
            self.config.initial_concurrency,
            self.config.max_concurrency,
            adaptive=self.config.adaptive,
        )
        # Loading the CA bundle costs ~50 ms: once per partition, not per worker, and only
        # where an endpoint speaks https.
        secure = any(e.url.startswith("https://") for e in self.config.endpoints)
        self.ssl_context = httpx.create_ssl_context() if secure else None
        probes = self._transport()
        self.pool = EndpointPool(self.config.endpoints, lambda e: self._probe(probes, e))
        try:
            workers = min(self.config.max_concurrency, len(pending))
            await asyncio.gather(*(self._worker(queue) for _ in range(workers)))
        finally:
            await self.pool.close()
            if probes is not self.injected:
                await probes.aclose()
        self.stats.limit_peak, self.stats.limit_lowest = self.limit.peak, self.limit.lowest
        self.stats.limit_final = int(self.limit.limit)
        self.stats.endpoint_rests = self.pool.rests
        return Fetched(self.results, self.stats)

    def _transport(self) -> httpx.AsyncBaseTransport:
        """A worker's connections: one keep-alive connection per endpoint.

        Requests go to a transport directly, not through an ``httpx.AsyncClient``: the client's
        URL merging, cookie jar, auth and redirect layers cost about a third of the CPU per
        request, and none of them applies here. The transport is our lean HTTP/1.1 one
        (:mod:`dspark_json.transport`), or httpx's default where the environment sets a proxy.
        """
        if self.injected is not None:
            return self.injected
        proxy = _proxy_for(self.config.endpoints[0].url)
        if proxy is None:
            return StreamTransport(self.ssl_context)
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
            body = await response.aread()
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
                self.results[index] = outcome = await self._send(transport, payload)
                if outcome.error is not None:
                    self.stats.failed += 1
                    self.stopped = self.stop_on_failure
        finally:
            if transport is not self.injected:
                await transport.aclose()

    async def _send(self, transport: httpx.AsyncBaseTransport, payload: bytes) -> Outcome:
        config, limit, pool, stats = self.config, self.limit, self.pool, self.stats
        loop = asyncio.get_running_loop()
        deadline = loop.time() + config.deadline
        error: dict[str, Any] = {}
        attempt = 0
        while True:
            left = deadline - loop.time()
            try:
                endpoint = await pool.pick(left)
            except NoEndpoint:
                return Outcome(None, self._no_endpoint(error, attempt))
            attempt += 1
            wait_hint: float | None = None
            await limit.acquire()
            stats.requests += 1
            started = time.perf_counter()
            try:
                async with asyncio.timeout(min(config.request_timeout, max(left, 0.001))):
                    status, body, headers = await self._request(
                        transport,
                        "POST",
                        self.urls[endpoint],
                        self.headers[endpoint],
                        content=payload,
                        timeouts=self.timeouts,
                    )
            except (httpx.TransportError, TimeoutError) as exc:
                limit.release()
                limit.on_overload()
                pool.failed(endpoint)
                error = transport_error(exc, attempt, config.request_timeout, self.secrets)
                stats.statuses[error["type"]] += 1
                retry = True
            else:
                limit.release()
                stats.statuses[str(status)] += 1
                if status == 200:
                    limit.on_success(time.perf_counter() - started)
                    stats.latencies.append(time.perf_counter() - started)
                    pool.succeeded(endpoint)
                    return Outcome(body.decode("utf-8", errors="replace"))
                if status in _OVERLOAD:
                    limit.on_overload()
                if status in _DOWN:
                    pool.failed(endpoint)
                else:
                    pool.succeeded(endpoint)
                error = http_error(status, body, attempt, self.secrets)
                retry = status in RETRY_STATUSES
                wait_hint = retry_after(headers)
            if not retry or attempt >= config.max_attempts:
                return Outcome(None, error)
            delay = wait_hint if wait_hint is not None else backoff(attempt)
            if loop.time() + delay >= deadline:
                error["message"] += (
                    f" (gave up: the next attempt would start after requestDeadline="
                    f"{config.deadline:g}s)"
                )
                return Outcome(None, error)
            stats.retries += 1
            logger.debug("Retrying after %s (attempt %d) in %.2fs", error["type"], attempt, delay)
            await asyncio.sleep(delay)

    def _no_endpoint(self, last: dict[str, Any], attempts: int) -> dict[str, Any]:
        urls = ", ".join(e.url for e in self.config.endpoints)
        reason = f"; last error: {last['type']}: {last['message']}" if last else ""
        return {
            "status": last.get("status"),
            "type": "endpoint_unavailable",
            "message": redact(
                f"no endpoint ({urls}) was healthy within requestDeadline="
                f"{self.config.deadline:g}s{reason}",
                self.secrets,
            ),
            "attempts": attempts,
        }
