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
from dspark_json.http.endpoints import PROBE_PATH, Endpoint
from dspark_json.http.failures import http_error, invalid_utf8_error, transport_error
from dspark_json.http.options import CHAT_COMPLETIONS, HttpOptions
from dspark_json.http.order import plan
from dspark_json.http.pool import Place, Pool
from dspark_json.http.replicas import request_model
from dspark_json.http.retry import backoff, retry_hint
from dspark_json.http.secrets import Secret, redact
from dspark_json.http.transport import BodyRefused, StreamTransport, proxy_for, read_body
from dspark_json.http.verdicts import TRANSPORT, Next, judge
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
    from a shared queue; each request takes its place in the task's pool
    (:class:`~dspark_json.http.pool.Pool`: endpoint, gate, in-flight limit, token budgets),
    is sent, judged (:mod:`.verdicts`), and the pool obeys the verdict."""

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
        self.stopped = False
        self.started = 0
        self.pending: list[int] = []
        self.rankings: Mapping[int, Sequence[Endpoint]] = {}
        # Options endpointsFile, resolveEndpoints, several models: http.replicas.
        self.models = [None if p is None else request_model(p) for p in payloads]
        # Option priority: a replica that appears is asked whether it schedules by it first.
        self.priority = _priority_of(payloads)
        secrets = [api_key, *(e.credentials for e in config.endpoints)]
        self.pool = Pool(
            config,
            [*secrets, *config.request_headers.secrets()],
            probe=lambda e: self._probe(self.probes, e),
            get=lambda e, path: self._get(self.probes, e, path),
            metrics=self._metrics,
            admit=self._schedules_priority if self.priority else None,
            changed=self._replicas_changed,
            backlog=lambda: len(self.pending) - self.started,
        )
        self.secrets = self.pool.secrets
        # The task's live progress, where it has one, reads the tally and the pool.
        self.stats.live = watch(self)

    async def run(self) -> Fetched:
        pending = self.pending = [i for i, p in enumerate(self.payloads) if p is not None]
        if self.config.prefix_order:
            sent = plan(self.payloads, self.config.endpoints)
            pending, self.rankings = sent.order, sent.rankings
        queue = iter(pending)
        # Loading the CA bundle is costly: once per partition, not per worker, and only
        # where an endpoint speaks https.
        secure = self.config.endpoints_file is not None or any(
            e.url.startswith("https://") for e in self.config.endpoints
        )  # the file's replicas may speak https
        self.ssl_context = httpx.create_ssl_context() if secure else None
        self.probes = probes = self._transport()
        pool = self.pool
        try:
            await pool.start(self.models)
            workers = min(self.config.max_concurrency, len(pending))
            await asyncio.gather(*(self._worker(queue) for _ in range(workers)))
        finally:
            await pool.close()
            if probes is not self.injected:
                await probes.aclose()
        tally = self.stats
        limits = pool.all_limits()
        stats = ClientStats(
            requests=tally.requests,
            retries=tally.retries,
            failed=tally.failed,
            statuses=dict(tally.statuses),
            latencies=tuple(tally.latencies),
            limit_peak=max(x.peak for x in limits),
            limit_lowest=min(x.lowest for x in limits),
            limit_final=max(int(x.limit) for x in limits),
            endpoint_rests=pool.endpoints.rests,
            model_requests=dict(tally.model_requests),
            model_latencies={m: tuple(v) for m, v in tally.model_latencies.items()},
            held_s=pool.held_s,
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
        """Replicas came or went (the pool took them): the send plan's endpoint preferences
        (prefixOrder) are made again over them, for the requests not yet sent."""
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

    async def _send(
        self,
        transport: httpx.AsyncBaseTransport,
        payload: bytes,
        prefer: Sequence[Endpoint],
        model: str | None = None,
    ) -> Outcome:
        """One request: place, send, judge, obey; again as the verdict and http.retry say, to
        the first endpoint of ``prefer`` that does not rest (one that failed it goes last for
        its retries), else round-robin."""
        config, pool, stats = self.config, self.pool, self.stats
        loop, attempt = asyncio.get_running_loop(), 0
        deadline = loop.time() + config.request_deadline
        error: RowError | None = None
        throttled = 0  # attempts answered with a rate limit: not counted against maxAttempts
        tokens = pool.tokens(payload)
        while True:
            place = await pool.place(deadline, prefer, model, error, attempt + 1, tokens=tokens)
            if isinstance(place, Outcome):
                if place.error is not None and place.error["type"] == "model_unavailable":
                    stats.statuses["model_unavailable"] += 1  # no endpoint served its model
                return place
            attempt += 1
            stats.sent(model)
            try:
                status, body, headers = await self._post(transport, place, payload, deadline)
            except BodyRefused as exc:
                refused = pool.refused(exc, place, attempt)
                assert refused.error is not None
                stats.statuses[refused.error["type"]] += 1
                return refused
            except (httpx.TransportError, TimeoutError) as exc:
                prefer = pool.obey(TRANSPORT, place, prefer, None)
                error = transport_error(exc, attempt, config.request_timeout, self.secrets)
                stats.statuses[error["type"]] += 1
                retry, wait_hint = TRANSPORT.next is Next.RETRY, None
            else:
                stats.statuses[str(status)] += 1
                verdict = judge(status, headers, body)
                prefer = pool.obey(verdict, place, prefer, body)
                if verdict.next is Next.ANSWER:
                    stats.answered(model, time.perf_counter() - place.started, body)
                    return _answered(body, attempt)
                error = http_error(status, body, attempt, self.secrets)
                if verdict.next is Next.REROUTE and await pool.misrouted(
                    place.endpoint, model, status, body, attempt
                ):
                    stats.retries += 1
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

    async def _post(
        self, transport: httpx.AsyncBaseTransport, place: Place, payload: bytes, deadline: float
    ) -> tuple[int, bytes, httpx.Headers]:
        """Send ``payload`` to ``place``'s endpoint: the answer's status, body and headers.
        What a hold at the gate left of the deadline bounds the attempt."""
        left = max(deadline - asyncio.get_running_loop().time(), 0.001)
        async with asyncio.timeout(min(self.config.request_timeout, left)):
            return await self._request(
                transport,
                "POST",
                self.urls[place.endpoint],
                self.headers[place.endpoint],
                content=payload,
                timeouts=self.timeouts,
            )
