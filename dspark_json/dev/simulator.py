"""A vLLM-compatible server for tests, the demo and benchmarks: ``dspark-json simulate``.

It answers ``GET /health``, ``GET /v1/models`` and ``POST /v1/chat/completions`` with bodies in
vLLM's shape. When a request carries ``response_format`` with a JSON Schema, the content is JSON
that conforms to it, the same for the same seed and messages; otherwise it is a line of prose.
``GET /stats`` reports request counts, so tests can prove that a prompt was not sent twice;
``GET /stats/latency`` the seconds from arrival to answer of each request that carried an
``x-dspark-tenant`` header, by tenant (the benchmarks' server-side latency), ``GET /stats/lag``
how late its own loop woke, with when (the part of a latency the machine's CPU added), and
``GET /stats/load`` its running and waiting counts at those wakes (every 20 ms).
``GET /metrics`` answers vLLM's scheduler gauges in Prometheus text (:func:`prometheus_text`);
``/stats`` counts those reads (``metrics_reads``).

Several models (``--served-model-name a,b``, or ``model="a,b"``): each name is a model of its own
that the simulator serves (vLLM's flag of that name gives one model several aliases; here the
names are distinct models, so that one process can stand for a replica of a pool that serves
several). ``/v1/models`` lists each; a completion for a model not served is vLLM's 404
(``The model `x` does not exist. Valid aliases: ...``); ``/stats`` counts the completions of
each model (``model:<name>``). ``POST /served-models`` with ``{"models": [...]}`` changes what
a running simulator serves (a model loaded later, or unloaded: replicas that come and go).

A gateway in front (``--gateway``): ``litellm`` answers as LiteLLM's proxy; ``llm-d`` as llm-d's
inference gateway: a completion whose ``x-llm-d-inference-objective`` names a sheddable objective
(``--objective name=-1``) is shed with a 429 and ``x-llm-d-request-dropped-reason`` while the
pool is saturated, and while the pool has no backend (``--no-backend``, or ``POST
/gateway/backends`` with ``{"ready": false}``: scaled to zero) every request is Envoy's 503
``no healthy upstream``.

Faults (:class:`Faults`) make it behave like a real deployment under stress: error statuses by
rate (in either of vLLM's error shapes, with ``Retry-After``), slow answers, connection resets,
bodies cut short, malformed content, an API key, and a capacity above which requests wait in an
unbounded queue, so latency grows as vLLM's does. Each fault is drawn from the seed, the request's
messages and how many times those messages were seen: the same run faults the same way whatever
the order of arrival.

First-answer faults (``first_*_rate``) break the first answer to a prompt in a way a re-ask
(option ``repairAttempts``) can fix: cut at ``max_tokens`` (fixed when asked with more), broken
JSON or prose (fixed when the conversation holds the answer and a user message after it), or a
required property left out (fixed once a later user message names it). Whether a prompt's first
answer is broken is drawn from the seed and the prompt (its messages before any answer), so a
replay of the same prompt is broken the same way.

The model's time and vLLM's prefix cache (:class:`~dspark_json.dev.engine.Engine`): with
``cache_blocks`` set, each answer's ``usage.prompt_tokens_details.cached_tokens`` says how many of
its prompt tokens the cache held, and ``/stats`` sums ``prompt_tokens`` and ``cached_tokens``;
with ``prefill_ms`` / ``decode_ms``, an answer takes that long per token computed (``capacity``
bounds the sequences worked on at once, as vLLM's ``max_num_seqs``). Off by default.

Scheduling (:class:`Scheduler`): the requests beyond ``capacity`` wait in a queue, first come
first served; with ``scheduling_policy="priority"`` (vLLM's ``--scheduling-policy priority``)
they are admitted by (the request's ``priority``, arrival), lower first, and with ``fcfs`` a
request with a non-zero ``priority`` is refused with vLLM's 400.

HTTP/1.1 with keep-alive on asyncio streams, so that the server is never the bottleneck of our
own benchmarks.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
import json
import logging
import math
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from dspark_json.dev.engine import Engine, PrefixCache
from dspark_json.dev.engine import prompt_tokens as _prompt_tokens
from dspark_json.response.envelope import CHOICE_EXTRAS, MESSAGE_EXTRAS, TOP_EXTRAS

__all__ = [
    "Faults",
    "Scheduler",
    "Simulator",
    "generate_value",
    "prometheus_text",
    "vllm_choice",
    "vllm_completion",
]

logger = logging.getLogger("dspark_json.dev.simulator")

_WORDS = (
    "amber basil cedar delta ember fjord garnet harbor indigo juniper kelp lumen meadow nectar "
    "onyx pollen quartz river saffron tundra umber violet willow xenon yarrow zephyr"
).split()
_REASONS = {
    200: "OK",
    401: "Unauthorized",
    408: "Request Timeout",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
}
_MAX_BODY = 64 * 1024 * 1024
#: The first-answer faults a re-ask can fix (:meth:`Faults.first_fault`).
_FIRST_FAULTS = ("truncated", "broken", "prose", "invalid")
#: The faults of one tool call (:meth:`Faults.tool_fault`).
_TOOL_FAULTS = ("broken", "drift", "unknown")
#: The context length the simulator's model has (vLLM's max_model_len); longer prompts are 400.
_MAX_MODEL_LEN = 2048


def generate_value(
    schema: Any, rng: random.Random, root: Mapping[str, Any] | None = None, depth: int = 0
) -> Any:
    """A value conforming to a JSON Schema (the subset structured-output schemas use)."""
    root = root if root is not None else schema
    if not isinstance(schema, Mapping) or depth > 12:
        return None
    if "$ref" in schema:
        section, name = str(schema["$ref"])[2:].split("/", 1)
        return generate_value(root.get(section, {}).get(name, {}), rng, root, depth + 1)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            branches = [
                b for b in schema[key] if not (isinstance(b, Mapping) and b.get("type") == "null")
            ]
            return generate_value(rng.choice(branches), rng, root, depth + 1) if branches else None
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = rng.choice(kinds) if kinds else "null"
    if kind == "object" or (kind is None and "properties" in schema):
        required = set(schema.get("required", ()))
        return {
            name: generate_value(sub, rng, root, depth + 1)
            for name, sub in schema.get("properties", {}).items()
            if name in required or rng.random() < 0.8
        }
    if kind == "array" or (kind is None and "items" in schema):
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", low + 3))
        count = rng.randint(low, max(low, min(high, low + 3)))
        return [generate_value(schema.get("items", {}), rng, root, depth + 1) for _ in range(count)]
    if kind == "integer":
        return rng.randint(int(schema.get("minimum", 0)), int(schema.get("maximum", 1000)))
    if kind == "number":
        bottom, top = float(schema.get("minimum", 0.0)), float(schema.get("maximum", 100.0))
        return round(rng.uniform(bottom, top), 4)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        return _string(schema, rng)
    return None


def _string(schema: Mapping[str, Any], rng: random.Random) -> str:
    fmt = schema.get("format")
    moment = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 10**8))
    if fmt == "date-time":
        return moment.isoformat().replace("+00:00", "Z")
    if fmt == "date":
        return moment.date().isoformat()
    text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 6)))
    max_length = schema.get("maxLength")
    return text[: int(max_length)] if max_length is not None else text


@dataclass(frozen=True)
class Faults:
    """What goes wrong, and how often (rates are probabilities per completion request)."""

    error_rates: Mapping[int, float] = field(default_factory=dict)  # HTTP status -> rate
    error_shape: Literal["nested", "flat"] = "nested"
    retry_after: str | None = None  # Retry-After sent with 429 and 503 (seconds or HTTP date)
    retry_after_ms: int | None = None  # retry-after-ms sent with 429 and 503
    slow_rate: float = 0.0
    slow_seconds: float = 5.0
    reset_rate: float = 0.0  # close the connection without an answer
    truncate_rate: float = 0.0  # send part of the body, then close
    malformed_rate: float = 0.0  # 200 whose content is cut off (finish_reason "length")
    capacity: int | None = None  # completions worked on at once; the rest wait in a queue
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"  # the queue's order (vLLM's flag)
    api_key: str | None = None  # when set, /v1/* wants "Authorization: Bearer <key>"
    vary: bool = False  # answer a repeated request differently, as a sampling model does
    drift_after: int | None = None  # after this many answers, add fields nobody expected
    served_schema: str | None = None  # JSON Schema text served at /health/json-schema and
    # followed when a request has no response_format (as GPUStack's patched vLLM does)
    # Per prompt, first answers a re-ask can fix (exclusive, drawn once per prompt):
    first_truncated_rate: float = 0.0  # cut at max_tokens until asked with more
    first_broken_rate: float = 0.0  # JSON with a syntax error until the answer is named
    first_prose_rate: float = 0.0  # prose until the answer is named
    first_invalid_rate: float = 0.0  # a required property left out until a user message names it
    # Per tool call (requests with tools), exclusive:
    tool_broken_rate: float = 0.0  # arguments that are not JSON (a trailing comma)
    tool_drift_rate: float = 0.0  # arguments with a key the parameters lack
    tool_unknown_rate: float = 0.0  # a call of a function the request did not offer
    # A gateway in front (``litellm``: LiteLLM proxy's shapes; ``llm-d``: llm-d's inference
    # gateway, its flow control and scale from zero; see :class:`Simulator`).
    gateway: Literal["litellm", "llm-d"] | None = None
    # llm-d: the InferenceObjectives by name (x-llm-d-inference-objective) and their priority;
    # a negative one is sheddable: a 429 with x-llm-d-request-dropped-reason once requests
    # wait (the pool at capacity and ``shed_queue`` or more waiting).
    objectives: Mapping[str, int] = field(default_factory=dict)
    shed_queue: int = 0
    # llm-d: no backend yet (the pool scaled to zero): 503 "no healthy upstream" until a
    # ``POST /gateway/backends {"ready": true}``.
    no_backend: bool = False
    # At most this many completions per ``rate_window`` seconds (fixed windows, as a gateway's
    # rpm limit with a shorter minute); the rest get 429 with the seconds left as a retry hint.
    rpm: int | None = None
    rate_window: float = 60.0

    def to_args(self) -> list[str]:
        """The ``dspark-json simulate`` arguments for these faults (the key goes by env)."""
        args = [f"--fail={status}={rate}" for status, rate in self.error_rates.items()]
        args.append(f"--error-shape={self.error_shape}")
        if self.retry_after is not None:
            args.append(f"--retry-after={self.retry_after}")
        if self.retry_after_ms is not None:
            args.append(f"--retry-after-ms={self.retry_after_ms}")
        args += [
            f"--slow-rate={self.slow_rate}",
            f"--slow-seconds={self.slow_seconds}",
            f"--reset-rate={self.reset_rate}",
            f"--truncate-rate={self.truncate_rate}",
            f"--malformed-rate={self.malformed_rate}",
        ]
        if self.capacity is not None:
            args.append(f"--capacity={self.capacity}")
        if self.scheduling_policy != "fcfs":
            args.append(f"--scheduling-policy={self.scheduling_policy}")
        if self.vary:
            args.append("--vary")
        if self.drift_after is not None:
            args.append(f"--drift-after={self.drift_after}")
        if self.served_schema is not None:
            args.append(f"--served-schema={self.served_schema}")
        if self.gateway is not None:
            args.append(f"--gateway={self.gateway}")
        args += [f"--objective={name}={rank}" for name, rank in self.objectives.items()]
        if self.shed_queue:
            args.append(f"--shed-queue={self.shed_queue}")
        if self.no_backend:
            args.append("--no-backend")
        if self.rpm is not None:
            args += [f"--rpm={self.rpm}", f"--rate-window={self.rate_window}"]
        for kind in _FIRST_FAULTS:
            rate = getattr(self, f"first_{kind}_rate")
            if rate:
                args.append(f"--first-{kind}-rate={rate}")
        for kind in _TOOL_FAULTS:
            rate = getattr(self, f"tool_{kind}_rate")
            if rate:
                args.append(f"--tool-{kind}-rate={rate}")
        return args

    def tool_fault(self, draw: float) -> str | None:
        """Which way one tool call is broken (:data:`_TOOL_FAULTS`), for a uniform ``draw``."""
        total = 0.0
        for kind in _TOOL_FAULTS:
            total += getattr(self, f"tool_{kind}_rate")
            if draw < total:
                return kind
        return None

    def first_fault(self, seed: int, prompt: Any) -> str | None:
        """Which way the first answer to ``prompt`` (its messages before any answer) is
        broken: one of :data:`_FIRST_FAULTS`, or ``None``."""
        rates = [getattr(self, f"first_{kind}_rate") for kind in _FIRST_FAULTS]
        if not any(rates):
            return None
        key = json.dumps([seed, "first", prompt], sort_keys=True)
        draw = random.Random(hashlib.sha256(key.encode()).hexdigest()).random()
        total = 0.0
        for kind, rate in zip(_FIRST_FAULTS, rates, strict=True):
            total += rate
            if draw < total:
                return kind
        return None


@dataclass(frozen=True)
class Reply:
    """An answer: status, JSON-able body, extra headers, and a transport fault to act out."""

    status: int
    payload: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    fault: Literal["reset", "truncate"] | None = None


class Simulator:
    """The server's state: served model, seed, faults, counters."""

    def __init__(
        self,
        *,
        model: str = "dspark-sim",
        seed: int = 0,
        latency: float = 0.0,
        faults: Faults | None = None,
        engine: Engine | None = None,
    ) -> None:
        #: The models served, the first one the default (``model`` is a comma-separated list).
        self.models = _model_names(model)
        self.model = self.models[0]
        self.seed = seed
        self.latency = latency
        self.faults = faults or Faults()
        self.engine = engine or Engine()
        self.prefix_cache = (
            PrefixCache(self.engine.cache_blocks, self.engine.block_size)
            if self.engine.cache_blocks is not None
            else None
        )
        self._prefill_free = 0.0  # when the engine's compute is free for the next prefill
        self.started = int(time.time())
        #: As vLLM's: its version and a hash of the server configuration.
        self.fingerprint = (
            f"vllm-0.32.0-{hashlib.sha256(f'{model}:{seed}'.encode()).hexdigest()[:8]}"
        )
        self.counts: Counter[str] = Counter()
        self._seen: Counter[str] = Counter()  # completion requests per messages digest
        self._first_max: dict[str, int | None] = {}  # prompt -> max_tokens first asked with
        self.scheduler = Scheduler(self.faults.capacity, self.faults.scheduling_policy)
        #: Seconds from arrival to answer, by the x-dspark-tenant header of the request.
        self.latencies: dict[str, list[float]] = {}
        #: (when, seconds late) of the loop's wakes: ``GET /stats/lag`` (the last 10 minutes).
        self.lags: deque[tuple[float, float]] = deque(maxlen=30_000)
        #: (when, running, waiting) at each of those wakes: ``GET /stats/load`` (a benchmark
        #: traces the queue the gates saw once a second).
        self.load: deque[tuple[float, int, int]] = deque(maxlen=30_000)
        self._window = (0.0, 0)  # option rpm: when the current window began, completions in it
        #: The clock of option rpm's windows (seconds): a test sets its own, so that what it
        #: checks does not hang on how fast the machine is.
        self.clock: Callable[[], float] = time.monotonic
        self.backend_ready = not self.faults.no_backend  # llm-d: the pool has an endpoint
        #: ``POST /hold {"after": N}``: completions past the N-th wait until ``{"after": null}``
        #: (a test reads a run half-done, whatever the machine's speed).
        self.hold_after: int | None = None
        self._released = asyncio.Event()

    async def serve(self, host: str, port: int) -> asyncio.Server:
        self._lag_probe = asyncio.ensure_future(self._probe_lag())
        return await asyncio.start_server(self._connection, host, port, backlog=1024)

    async def _probe_lag(self) -> None:
        """How late the simulator's own loop wakes (a 20 ms sleep's excess, every 20 ms), kept
        with when (``time.time()``) for ``GET /stats/lag``: a benchmark tells a tenant's latency
        that the machine's CPU added (the simulator's timers late) from the queue's."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(0.02)
            now = time.time()
            self.lags.append((now, loop.time() - asked - 0.02))
            self.load.append((now, self.scheduler.running, self.scheduler.waiting))

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                method, path, headers, body = request
                reply = await self.route(method, path, body, headers)
                keep_alive = headers.get("connection", "").lower() != "close"
                data = _response(reply, keep_alive)
                if reply.fault == "reset":
                    break
                if reply.fault == "truncate":
                    writer.write(data[: len(data) - max(1, len(data) // 3)])
                    await writer.drain()
                    break
                writer.write(data)
                await writer.drain()
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def route(
        self, method: str, path: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> Reply:
        """Answer one request."""
        self.counts["requests"] += 1
        path = path.split("?", 1)[0]
        if self.faults.gateway == "litellm" and (path == "/health" or path.startswith("/v1/")):
            refused = self._litellm_auth(path, headers or {})
            if refused is not None:
                return refused
        if self.faults.gateway == "llm-d":
            gated = self._llm_d(method, path, body, headers or {})
            if gated is not None:
                return gated
        if path == "/health" and self.faults.gateway == "litellm":
            # LiteLLM's /health sends a completion to every deployment of every model.
            self.counts["health_completions"] += len(self.models)
            healthy = [{"model": f"hosted_vllm/{m}"} for m in self.models]
            return Reply(200, {"healthy_endpoints": healthy, "unhealthy_endpoints": []})
        if path == "/health/liveliness" and self.faults.gateway == "litellm":
            return Reply(200, "I'm alive!")
        if path == "/health":
            return Reply(200)
        if path == "/stats":
            return Reply(200, dict(self.counts))
        if path == "/stats/latency":
            return Reply(200, self.latencies)
        if path == "/stats/lag":
            return Reply(200, list(self.lags))
        if path == "/stats/load":
            return Reply(200, list(self.load))
        if path == "/metrics":
            self.counts["metrics_reads"] += 1  # how often the gates read it (http.readings)
            text = prometheus_text(self.models, self.scheduler)
            return Reply(200, text, {"content-type": "text/plain; version=0.0.4; charset=utf-8"})
        if path == "/health/json-schema":
            if self.faults.served_schema is None:
                return Reply(404, self._error("No schema is served.", 404))
            return Reply(200, json.loads(self.faults.served_schema))
        key = self.faults.api_key
        authorization = (headers or {}).get("authorization")
        if key is not None and path.startswith("/v1/") and authorization != f"Bearer {key}":
            self.counts["status_401"] += 1
            return Reply(401, self._error("Unauthorized: missing or wrong API key.", 401))
        if path == "/v1/models":
            return Reply(200, self._models())
        if path == "/served-models" and method == "POST":
            return self._serve_models(body)
        if path == "/hold" and method == "POST":
            return self._hold(body)
        if path == "/v1/chat/completions":
            if method != "POST":
                return Reply(405, self._error("Only POST is allowed", 405))
            self.counts["chat_completions"] += 1
            if self.hold_after is not None and self.counts["chat_completions"] > self.hold_after:
                await self._released.wait()
            arrived = time.perf_counter()
            reply = await self._complete(body)
            self.counts[f"status_{reply.status}" if reply.fault is None else reply.fault] += 1
            tenant = (headers or {}).get("x-dspark-tenant")
            if tenant is not None:
                self.latencies.setdefault(tenant, []).append(time.perf_counter() - arrived)
            return reply
        return Reply(404, self._error(f"Not Found: {path}", 404))

    def _hold(self, body: bytes) -> Reply:
        """``POST /hold``: ``{"after": N}`` holds the completions past the N-th answered so far
        (they wait, connections open); ``{"after": null}`` lets every held one go on."""
        try:
            given = json.loads(body or b"{}")
        except ValueError:
            given = None
        after = given.get("after") if isinstance(given, dict) else "bad"
        if after is not None and (not isinstance(after, int) or isinstance(after, bool)):
            return Reply(400, self._error('the body must be {"after": N} or {"after": null}', 400))
        self.hold_after = after
        if after is None:
            self._released.set()
        else:
            self._released.clear()
        return Reply(200, {"after": after})

    def _llm_d(
        self, method: str, path: str, body: bytes, headers: Mapping[str, str]
    ) -> Reply | None:
        """llm-d's gateway in front: ``POST /gateway/backends`` (``{"ready": bool}``) scales
        the pool from or to zero; with no backend, every request to the pool is Envoy's 503
        ``no healthy upstream``; a completion whose objective (x-llm-d-inference-objective) is
        sheddable (negative priority) is shed with a 429 and x-llm-d-request-dropped-reason
        while the pool is saturated. ``None``: the request goes on to the backend."""
        if path == "/gateway/backends" and method == "POST":
            try:
                given = json.loads(body or b"{}")
            except ValueError:
                given = None
            if not isinstance(given, dict) or not isinstance(given.get("ready", True), bool):
                message = 'the body must be a JSON object {"ready": true} or {"ready": false}'
                return Reply(400, self._error(message, 400))
            self.backend_ready = given.get("ready", True)
            return Reply(200, {"ready": self.backend_ready})
        if not self.backend_ready and (path.startswith("/v1/") or path == "/metrics"):
            self.counts["no_backend"] += 1
            return Reply(503, "no healthy upstream", {"content-type": "text/plain"})
        if path != "/v1/chat/completions":
            return None
        objective = headers.get("x-llm-d-inference-objective")
        sheddable = self.faults.objectives.get(objective or "", 0) < 0
        capacity = self.scheduler.capacity
        saturated = (
            capacity is not None
            and self.scheduler.running >= capacity
            and self.scheduler.waiting >= self.faults.shed_queue
        )
        if sheddable and saturated:
            self.counts["shed"] += 1
            reason = f"sheddable objective {objective!r} dropped: the pool is saturated"
            return Reply(
                429,
                self._error("Request dropped by flow control.", 429),
                {"x-llm-d-request-dropped-reason": reason},
            )
        return None

    def _litellm_auth(self, path: str, headers: Mapping[str, str]) -> Reply | None:
        """LiteLLM's answers about the key (with a master key set): no key is 401 on /v1/* and
        500 on /health; a wrong key (no database of virtual keys) is 400 "No connected db"."""
        key = self.faults.api_key
        given = headers.get("authorization")
        if key is None or given == f"Bearer {key}":
            return None
        if given is None:
            message, code = "Authentication Error, No api key passed in.", 401
            code = 500 if path == "/health" else code
        else:
            message, code = "Authentication Error, No connected db.", 400
        self.counts[f"status_{code}"] += 1
        return Reply(code, _litellm_error(message, code))

    def _throttled(self) -> Reply | None:
        """Option rpm: a 429 once this window's completions are spent, with the seconds to the
        next window as the hint (LiteLLM's ``llm_provider-retry-after`` behind the gateway,
        else ``Retry-After``)."""
        limit = self.faults.rpm
        if limit is None:
            return None
        now = self.clock()
        began, used = self._window
        if now - began >= self.faults.rate_window:
            began, used = now, 0
        if used < limit:
            self._window = (began, used + 1)
            return None
        self._window = (began, used)
        left = str(max(1, math.ceil(began + self.faults.rate_window - now)))
        self.counts["rate_limited"] += 1
        name = "llm_provider-retry-after" if self.faults.gateway == "litellm" else "retry-after"
        message = f"Rate limit reached: {limit} requests per {self.faults.rate_window:g}s."
        return Reply(429, self._error(message, 429), {name: left})

    async def _complete(self, body: bytes) -> Reply:
        throttled = self._throttled()
        if throttled is not None:
            return throttled
        digest = hashlib.sha256(body).hexdigest()
        self._seen[digest] += 1
        if self._seen[digest] > 1:
            self.counts["repeated"] += 1  # the same request body again: a re-call
        draw = random.Random(f"{self.seed}:{digest}:{self._seen[digest]}").random
        faults = self.faults
        if draw() < faults.reset_rate:
            return Reply(200, fault="reset")
        status = _pick_status(faults.error_rates, draw())
        if status is not None:
            headers = {}
            if status in (429, 503) and faults.retry_after is not None:
                headers["retry-after"] = faults.retry_after
            if status in (429, 503) and faults.retry_after_ms is not None:
                headers["retry-after-ms"] = str(faults.retry_after_ms)
            return Reply(status, self._error(f"Injected fault: HTTP {status}", status), headers)
        slow = draw() < faults.slow_rate
        truncate = draw() < faults.truncate_rate
        malformed = draw() < faults.malformed_rate
        call = self._seen[digest] if self.faults.vary else 1
        priority = _priority(body)
        if priority and self.scheduler.policy != "priority":
            # As vLLM's input processing says it, before the request is queued.
            message = f"Got priority {priority} but Priority scheduling is not enabled."
            return Reply(400, self._error(message, 400))
        model = _request_model(body) if len(self.models) > 1 else ""
        await self.scheduler.acquire(priority, model)
        try:
            status, payload = await self._work(slow, body, call)
        finally:
            self.scheduler.release(model)
        if malformed and status == 200:
            for choice in payload["choices"]:
                content = choice["message"]["content"]
                choice["message"]["content"] = content[: max(1, len(content) // 2)]
                choice["finish_reason"] = "length"
        return Reply(status, payload, fault="truncate" if truncate else None)

    async def _work(self, slow: bool, body: bytes, call: int) -> tuple[int, Any]:
        """The answer, after the time it takes: the fixed latency, a slow fault, and the
        engine's prefill of the tokens not cached and decode of the output."""
        seconds = self.latency + (self.faults.slow_seconds if slow else 0.0)
        if seconds:
            await asyncio.sleep(seconds)
        status, payload = self._chat(body, call)
        engine, cache = self.engine, self.prefix_cache
        if status != 200 or (cache is None and not engine.prefill_ms and not engine.decode_ms):
            return status, payload
        tokens = _prompt_tokens(json.loads(body)["messages"])
        now = asyncio.get_running_loop().time()
        cached, ready = cache.lookup(tokens) if cache is not None else (0, 0.0)
        prefill, decode = engine.seconds(
            len(tokens) - cached, payload["usage"]["completion_tokens"]
        )
        # Prefills share the engine's compute, one after another; the blocks found first.
        done = max(now, ready, self._prefill_free) + prefill
        self._prefill_free = done
        if cache is not None:
            # Cached when scheduled, as vLLM does: a request after it finds them and waits.
            cache.insert(tokens, done)
            payload["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
            self.counts["prompt_tokens"] += len(tokens)
            self.counts["cached_tokens"] += cached
        if done + decode > now:
            await asyncio.sleep(done + decode - now)
        return status, payload

    def _error(self, message: str, code: int, *, param: str | None = None) -> dict[str, Any]:
        kind = {
            400: "BadRequestError",
            401: "AuthenticationError",
            404: "NotFoundError",
            405: "BadRequestError",
            429: "RateLimitError",
        }.get(code, "InternalServerError" if code >= 500 else "BadRequestError")
        if self.faults.error_shape == "flat":
            return {
                "object": "error",
                "message": message,
                "type": kind,
                "param": None,
                "code": code,
            }
        return _error(message, kind, code, param)

    def _models(self) -> dict[str, Any]:
        if self.faults.gateway == "litellm":  # LiteLLM's own list (1.108): no vLLM fields
            cards = [
                {
                    "id": name,
                    "object": "model",
                    "created": 1677610602,
                    "owned_by": "openai",
                    "max_input_tokens": _MAX_MODEL_LEN,
                    "max_output_tokens": _MAX_MODEL_LEN,
                }
                for name in self.models
            ]
            return {"data": cards, "object": "list"}
        cards = [
            {
                "id": name,
                "object": "model",
                "created": self.started,
                "owned_by": "vllm",
                "root": name,
                "parent": None,
                "max_model_len": _MAX_MODEL_LEN,
            }
            for name in self.models
        ]
        return {"object": "list", "data": cards}

    def _serve_models(self, body: bytes) -> Reply:
        """``POST /served-models``: serve these models from now on (``{"models": [...]}``)."""
        try:
            names = json.loads(body)["models"]
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise TypeError(names)
        except (ValueError, KeyError, TypeError):
            message = 'POST /served-models wants {"models": ["name", ...]}'
            return Reply(400, self._error(message, 400))
        self.models = tuple(names)
        return Reply(200, self._models())

    def _chat(self, body: bytes, call: int = 1) -> tuple[int, Any]:
        try:
            request = json.loads(body)
        except ValueError:
            return 400, self._error("The request body is not valid JSON.", 400)
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            # As vLLM's request validation (pydantic) says it.
            given = request.get("messages") if isinstance(request, dict) else request
            kind = "missing" if given is None else "list_type"
            message = (
                f"1 validation error:\n  {{'type': '{kind}', 'loc': 'body.messages', 'msg': "
                f"'{'Field required' if given is None else 'Input should be a valid list'}', "
                f"'input': {given!r}}}"
            )
            return 400, _error(message, "Bad Request", 400, "body.messages")
        model = request.get("model")
        if model not in self.models:
            # As vLLM 0.32 says it (tests/data/vllm-0.32/error_wrong_model.json).
            served = ", ".join(self.models)
            message = f"The model `{model}` does not exist. Valid aliases: {served}."
            return 404, self._error(message, 404, param="model")
        self.counts[f"model:{model}"] += 1
        if request.get("stream"):
            return 400, self._error("stream=true is not supported here.", 400)
        key = json.dumps(
            [self.seed, request.get("seed"), request["messages"], call], sort_keys=True
        )
        digest = hashlib.sha256(key.encode()).hexdigest()
        rng = random.Random(digest)
        schema = _json_schema(request.get("response_format"))
        if schema is None and self.faults.served_schema is not None:
            schema = json.loads(self.faults.served_schema)
        drifted = (
            self.faults.drift_after is not None
            and self.counts["completions_ok"] >= self.faults.drift_after
        )
        prompt_tokens = len(_prompt_tokens(request["messages"]))
        if prompt_tokens > _MAX_MODEL_LEN:
            message = (
                f"This model's maximum context length is {_MAX_MODEL_LEN} tokens. However, your "
                f"prompt contains at least {prompt_tokens} input tokens, which exceeds this "
                "limit even without any output tokens. Please reduce the length of the input "
                f"prompt. (parameter=input_tokens, value={prompt_tokens})"
            )
            return 400, self._error(message, 400, param="input_tokens")
        fault = self._first_fault(request, schema)
        tools = _offered(request)
        if tools:
            choices, completion_tokens = _tool_choices(request, tools, rng, self.faults)
        else:
            choices, completion_tokens = _choices(
                request, schema, rng, drifted=drifted, fault=fault
            )
        self.counts["completions_ok"] += 1
        extra = {"metadata": {"engine": "dspark-sim", "queue_ms": rng.randint(0, 50)}}
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }
        answer = vllm_completion(
            id=f"chatcmpl-{digest[:32]}",
            created=int(time.time()),
            model=model,
            choices=choices,
            usage=usage,
            fingerprint=self.fingerprint,
        )
        if self.faults.gateway == "litellm":
            answer = litellm_completion(answer)
        return 200, (extra if drifted else {}) | answer

    def _first_fault(self, request: Mapping[str, Any], schema: Any) -> str | None:
        """The first-answer fault of this request, where this request is not yet the re-ask
        that fixes it."""
        messages = request["messages"]
        roles = [m.get("role") if isinstance(m, dict) else None for m in messages]
        answered = roles.index("assistant") if "assistant" in roles else None
        prompt = messages if answered is None else messages[:answered]
        fault = self.faults.first_fault(self.seed, prompt)
        max_tokens = request.get("max_tokens")
        first_max = self._first_max.setdefault(json.dumps(prompt, sort_keys=True), max_tokens)
        more_tokens = (
            isinstance(max_tokens, int) and isinstance(first_max, int) and max_tokens > first_max
        )
        if answered is not None or more_tokens:
            self.counts["reasks"] += 1
        followed = [
            str(m.get("content", ""))
            for m in (messages[answered:] if answered is not None else [])
            if isinstance(m, dict) and m.get("role") == "user"
        ]
        required = sorted(schema.get("required", ())) if isinstance(schema, Mapping) else []
        fixed = {
            None: True,
            "truncated": more_tokens,
            "broken": schema is None or bool(followed),
            "prose": bool(followed),
            "invalid": not required or any(f"'{required[0]}'" in text for text in followed),
        }
        if fixed[fault]:
            return None
        self.counts[f"first_{fault}"] += 1
        return fault


def _choices(
    request: Mapping[str, Any], schema: Any, rng: random.Random, *, drifted: bool, fault: str | None
) -> tuple[list[dict[str, Any]], int]:
    """The answer's choices (broken as ``fault`` says) and the completion tokens they took."""
    max_tokens = request.get("max_tokens")
    choices = []
    completion_tokens = 0
    for index in range(int(request.get("n") or 1)):
        if schema is not None:
            value = generate_value(schema, rng)
            if drifted and isinstance(value, dict):
                value["confidence"] = round(rng.random(), 3)  # a field the schema lacks
            if fault == "invalid" and isinstance(value, dict):
                value.pop(sorted(schema.get("required", ()))[0], None)
            content = json.dumps(value, ensure_ascii=False)
            if fault == "broken":
                content = content[:-1] + ", }"  # a trailing comma: not JSON
        else:
            content = "Here is my answer: " + " ".join(rng.choices(_WORDS, k=12)) + "."
        if fault == "prose":
            content = "Sure! " + " ".join(rng.choices(_WORDS, k=12)) + "."
        finish = "stop"
        if isinstance(max_tokens, int) and len(content) // 4 + 1 > max_tokens:
            content, finish = content[: 4 * max_tokens], "length"  # ~4 characters a token
        tokens = len(content) // 4 + 1
        if fault == "truncated" and finish == "stop":  # the model ran on to the limit
            content, finish = content[: max(1, len(content) // 2)], "length"
            tokens = max_tokens if isinstance(max_tokens, int) else len(content) // 4 + 1
        choices.append(vllm_choice(index, content, finish))
        completion_tokens += tokens
    return choices, completion_tokens


def _offered(request: Mapping[str, Any]) -> dict[str, Any]:
    """The functions a request offers (name -> parameters), none where tool_choice is none."""
    if request.get("tool_choice") == "none" or not isinstance(request.get("tools"), list):
        return {}
    out = {}
    for tool in request["tools"]:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            out[function["name"]] = function.get("parameters") or {"type": "object"}
    return out


def _tool_choices(
    request: Mapping[str, Any], tools: Mapping[str, Any], rng: random.Random, faults: Faults
) -> tuple[list[dict[str, Any]], int]:
    """Choices that call tools, as vLLM 0.32 answers them: a named ``tool_choice`` (guided
    decoding) calls that function once, content ``""``, finish_reason ``stop``; ``auto`` and
    ``required`` call one to three of the tools, content null, finish_reason ``tool_calls``.
    Each call's arguments are JSON text that follows the function's parameters, unless
    ``faults`` break it."""
    choice = request.get("tool_choice")
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    choices = []
    completion_tokens = 0
    for index in range(int(request.get("n") or 1)):
        names: list[str] = (
            [str(named)] if named in tools else rng.choices(list(tools), k=rng.choice([1, 1, 2, 3]))
        )
        calls = []
        for name in names:
            value = generate_value(tools[name], rng)
            kind = faults.tool_fault(rng.random())
            if kind == "drift" and isinstance(value, dict):
                value["confidence"] = round(rng.random(), 3)  # a key the parameters lack
            arguments = json.dumps(value, ensure_ascii=False)
            if kind == "broken":
                arguments = arguments[:-1] + ", }" if arguments.endswith("}") else arguments + ","
            calls.append(
                {
                    "id": f"chatcmpl-tool-{rng.getrandbits(128):032x}",
                    "type": "function",
                    "function": {
                        "name": f"{name}_v2" if kind == "unknown" else name,
                        "arguments": arguments,
                    },
                }
            )
            completion_tokens += len(arguments) // 4 + 1
        finish = "stop" if named in tools else "tool_calls"
        answer = vllm_choice(index, "" if named in tools else None, finish)
        # As vLLM's ChatMessage orders its fields: tool_calls after function_call.
        message = answer["message"]
        answer["message"] = {
            **{k: v for k, v in message.items() if k != "reasoning"},
            "tool_calls": calls,
            "reasoning": message["reasoning"],
        }
        choices.append(answer)
    return choices, completion_tokens


def _json_schema(response_format: Any) -> Mapping[str, Any] | None:
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        inner = response_format.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, dict) else None
        if isinstance(schema, dict):
            return schema
    return None


def vllm_completion(
    *,
    id: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    usage: Mapping[str, int],
    fingerprint: str,
) -> dict[str, Any]:
    """A chat completion body as vLLM 0.32 writes it: its keys, in its order, its null extras
    (:mod:`dspark_json.response.envelope`'s)."""
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": {**usage, "prompt_tokens_details": None, "completion_tokens_details": None},
        **dict.fromkeys(TOP_EXTRAS),
    }


def litellm_completion(answer: Mapping[str, Any]) -> dict[str, Any]:
    """A vLLM answer as LiteLLM's proxy (1.108) hands it on: vLLM's fields its OpenAI type
    lacks go into ``provider_specific_fields`` (the choice's ``stop_reason`` among them; the
    message's ``reasoning``), and vLLM's other message extras are dropped."""
    choices = []
    for choice in answer["choices"]:
        extra = {k: choice[k] for k in ("stop_reason", *CHOICE_EXTRAS) if k in choice}
        kept = {k: v for k, v in choice.items() if k not in extra}
        message = {
            k: v for k, v in kept["message"].items() if k not in ("reasoning", *MESSAGE_EXTRAS)
        }
        message["provider_specific_fields"] = {"reasoning": kept["message"].get("reasoning")}
        choices.append({**kept, "message": message, "provider_specific_fields": extra})
    return {**answer, "choices": choices}


def _litellm_error(message: str, code: int) -> dict[str, Any]:
    """LiteLLM proxy's error body (its ``code`` is text)."""
    return {"error": {"message": message, "type": "auth_error", "param": "None", "code": str(code)}}


def vllm_choice(index: int, content: str | None, finish: str) -> dict[str, Any]:
    """One choice as vLLM 0.32 writes it (no ``tool_calls`` key without tools)."""
    return {
        "index": index,
        "message": {
            "role": "assistant",
            "content": content,
            "refusal": None,
            **dict.fromkeys(MESSAGE_EXTRAS),
            "reasoning": None,
        },
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": None,
        **dict.fromkeys(CHOICE_EXTRAS),
    }


def _model_names(text: str) -> tuple[str, ...]:
    """``--served-model-name a,b``: the names, in order, blanks dropped."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise ValueError(f"the simulator needs at least one model name, got {text!r}")
    return names


def _request_model(body: bytes) -> str:
    """The request's ``model`` ("" where the body is not a JSON object with a text there)."""
    try:
        value = json.loads(body).get("model", "")
    except (ValueError, AttributeError):
        return ""
    return value if isinstance(value, str) else ""


def _priority(body: bytes) -> int:
    """The request's ``priority`` (0 where it has none, or the body is not a JSON object with
    a whole number there: the request's own validation answers that later)."""
    if b'"priority"' not in body:
        return 0
    try:
        value = json.loads(body).get("priority", 0)
    except (ValueError, AttributeError):
        return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class Scheduler:
    """The sequences worked on at once (``capacity``, vLLM's ``max_num_seqs``; ``None``: no
    bound) and the queue of the others: admitted first come first served (``fcfs``), or by
    (priority, arrival), lower first (``priority``), as vLLM's scheduler does. A waiting
    request is never pre-empted by a later one of lower number once it runs. Running and
    waiting requests are counted by model too (the models of one simulator share its
    capacity, as if they shared a GPU)."""

    def __init__(self, capacity: int | None, policy: str = "fcfs") -> None:
        if policy not in ("fcfs", "priority"):
            raise ValueError(f"scheduling policy must be fcfs or priority, got {policy!r}")
        self.capacity = capacity
        self.policy = policy
        self.running = 0
        self._running_by: Counter[str] = Counter()
        self._waiting: list[tuple[int, int, asyncio.Future[None], str]] = []  # a heap
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def running_of(self, model: str) -> int:
        """The requests for ``model`` running now."""
        return self._running_by[model]

    def waiting_of(self, model: str) -> int:
        """The requests for ``model`` waiting now."""
        return sum(1 for entry in self._waiting if entry[3] == model)

    @property
    def usage(self) -> float:
        """The KV cache's use, as the simulator models it: the running sequences' share of
        ``capacity`` (0 without a bound)."""
        return self.running / self.capacity if self.capacity else 0.0

    async def acquire(self, priority: int = 0, model: str = "") -> None:
        """Wait for a place to run (returns at once while there is room and nobody waits)."""
        if self.capacity is None or (self.running < self.capacity and not self._waiting):
            self.running += 1
            self._running_by[model] += 1
            return
        rank = priority if self.policy == "priority" else 0
        future = asyncio.get_running_loop().create_future()
        entry = (rank, next(self._arrivals), future, model)
        heapq.heappush(self._waiting, entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(model)  # admitted as it was cancelled: hand the place on
            elif entry in self._waiting:
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
            raise

    def release(self, model: str = "") -> None:
        """A running sequence (for ``model``) ended: the first waiting one (by policy) takes
        its place."""
        self._running_by[model] -= 1
        while self._waiting:
            _, _, future, admitted = heapq.heappop(self._waiting)
            if not future.done():
                future.set_result(None)  # the place passes on: running stays the same
                self._running_by[admitted] += 1
                return
        self.running -= 1


#: vLLM's scheduler gauges (name, help), as its Prometheus logger declares them (v1 engine).
_GAUGES = (
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
)


def prometheus_text(models: Sequence[str], scheduler: Scheduler) -> str:
    """``GET /metrics``: vLLM's gauges of running and waiting requests and KV-cache use, in
    Prometheus' text format, labelled by ``engine`` and ``model_name`` as vLLM labels them.

    One series per model served: a vLLM process serves one model (several
    ``--served-model-name`` are aliases of it, and its gauges carry the first name only), so a
    pool of several models is several processes, each with its own series; here one simulator
    stands for them, each model's series counting its own requests (``running``,
    ``waiting``). The KV-cache gauge is the whole simulator's in each: its models share its
    capacity. With one model, every request counts under it."""
    one = len(models) == 1
    lines = []
    for index, (name, doc) in enumerate(_GAUGES):
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
        for model in models:
            key = "" if one else model
            value = (
                float(scheduler.running if one else scheduler.running_of(key)),
                float(scheduler.waiting if one else scheduler.waiting_of(key)),
                scheduler.usage,
            )[index]
            label = _label(model)
            lines.append(f'{name}{{engine="0",model_name="{label}"}} {value!r}')
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    """A Prometheus label value: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _error(message: str, kind: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


async def _read_request(
    reader: asyncio.StreamReader,
) -> tuple[str, str, dict[str, str], bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    if length > _MAX_BODY:
        raise ValueError("request body too large")
    body = await reader.readexactly(length) if length else b""
    return method, path, headers, body


def _pick_status(rates: Mapping[int, float], draw: float) -> int | None:
    total = 0.0
    for status, rate in rates.items():
        total += rate
        if draw < total:
            return status
    return None


def _response(reply: Reply, keep_alive: bool) -> bytes:
    payload = reply.payload
    if isinstance(payload, str):
        body = payload.encode()
    else:
        body = b"" if payload is None else json.dumps(payload, ensure_ascii=False).encode()
    headers = {"content-type": "application/json", **reply.headers}
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    head = (
        f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Error')}\r\n"
        f"content-length: {len(body)}\r\n{extra}"
        f"connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode("latin-1") + body


async def run(
    host: str,
    port: int,
    *,
    model: str,
    seed: int,
    latency: float,
    faults: Faults | None = None,
    engine: Engine | None = None,
) -> None:
    """Serve until cancelled; announce the bound address on stdout (first line)."""
    import sys

    simulator = Simulator(model=model, seed=seed, latency=latency, faults=faults, engine=engine)
    server = await simulator.serve(host, port)
    bound = server.sockets[0].getsockname()
    sys.stdout.write(f"dspark-json simulator listening on http://{bound[0]}:{bound[1]}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()
