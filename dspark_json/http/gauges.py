"""What each endpoint's ``/metrics`` says about its load (option ``maxServerQueue``).

vLLM exposes its scheduler's gauges in Prometheus' text format: ``vllm:num_requests_waiting``,
``vllm:num_requests_running`` and ``vllm:kv_cache_usage_perc`` (0 to 1; ``gpu_cache_usage_perc``
before vLLM 0.9.2), one sample per engine, labelled ``model_name``. A stream that shares the
pool with interactive traffic reads them to send only into the capacity the pool leaves free.

The gauges are an endpoint's, whatever the model of the request waiting at the gate: one vLLM
process serves one model (under several aliases, only the first labels its gauges), and where
one ``/metrics`` holds several models' series (a router in front of several engines), their
sum is what the endpoint has to do. So a request routed by its own model (http.replicas) is
held at a saturated endpoint whatever option ``model`` says.

- :func:`parse_gauges` reads the three gauges out of the text (summed over engines and over
  the models they are labelled with).
- :class:`Gauges` is the process-wide cache: each endpoint's ``/metrics`` is fetched at most
  once per :data:`REFRESH_S` per worker process, whatever the number of requests (the workers
  of one loop share one fetch; each Spark task running at once is a process of its own). The
  fetch goes through the client's own transport (its TLS settings, the TLS server name of an
  address a name resolved to, its header and body bounds); a reading unused for
  :data:`FORGET_S` is dropped (replicas' addresses come and go). A fetch that fails leaves no
  reading (the latency-driven limit paces the requests): a stale reading kept would hold
  every request until its deadline. The fetch is bounded
  (:data:`MAX_METRICS_BYTES`, :data:`FETCH_TIMEOUT_S`) and never fails a row: an endpoint whose
  ``/metrics`` is missing or is not vLLM's (a gateway) is logged once per process and left to
  the latency-driven limit (:class:`~dspark_json.http.concurrency.AdaptiveLimit`), and read
  again after :data:`UNSUPPORTED_RETRY_S` (doubling up to :data:`UNSUPPORTED_MAX_RETRY_S`: one
  odd answer does not turn the gate off for good). A reading with a number that is not finite
  or not plausible (``+Inf``, ``NaN``, a negative count, a KV use past 1, engines summing past
  :data:`MAX_GAUGE`) is unknown (:class:`Unreadable`): no reading, one WARN per endpoint and
  process, never an error.
- :class:`Gate` holds back a task's new requests to a saturated endpoint (never one in flight).
  An endpoint is saturated when more than ``maxServerQueue`` requests wait, or its KV cache is
  at least :data:`KV_SATURATED` full, or its last reading is older than :data:`MAX_AGE_S` (as
  the Gateway API inference extension treats stale metrics). Each reading gives the task a
  target of requests in flight: those it has out (sent, not those still waiting for its
  in-flight limit) plus the room the reading shows (the free share of the KV cache up to
  :data:`KV_SATURATED`, plus the queue up to ``maxServerQueue``; :data:`IDLE_ROOM` where
  nothing runs, the KV share of a sequence not known yet), weighed with the target
  before it (:data:`SMOOTHING`: one reading of load that changes within an answer's time is
  mostly noise), and lowered at once where requests queue beyond ``maxServerQueue``, so that
  the stream backs off within a reading (about a second) when interactive load rises. Rising
  to a higher target is spread over the refresh interval, so the workers waiting at the gate
  do not all start at once when a reading clears. A request held at an endpoint with no room
  goes to another of its endpoints that has room (:meth:`Gate.wait`'s ``also``).
- The room a reading shows is the pool's, shared by the tasks sending to the endpoint at once:
  each task takes its part (:func:`part`) of it, by the count of this machine's tasks that send
  there (their leases in the shared readings directory:
  :func:`dspark_json.http.readings.tasks`), in whole requests, the remainder to as many tasks as
  it holds. A reading's room split so still fills: each reading gives what is left again, so
  the stream reaches the same level as one task would, without the ``k`` tasks each taking the
  whole room at once. The tasks of other machines are not seen from here: from the second
  micro-batch of a stream on, the driver tells each task how many machines ran the last
  batches' tasks and how many ran at once (their metrics records), and the count is this
  machine's times the machines, at most those at once (:func:`across`); in a batch read and
  the first micro-batch, each machine's tasks together take the room once (``m`` machines: up
  to ``m`` times at one reading, taken back at the next, where requests queue beyond
  ``maxServerQueue``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import re
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import httpx

from dspark_json.errors import mask_uris
from dspark_json.http import readings
from dspark_json.http.transport import BodyTooLarge
from dspark_json.phases import phase

__all__ = [
    "Gate",
    "Gauges",
    "MetricsFetch",
    "Reading",
    "Unreadable",
    "across",
    "parse_gauges",
    "part",
]

logger = logging.getLogger("dspark_json")

#: Seconds between two fetches of one endpoint's /metrics (per worker process).
REFRESH_S = 1.0
#: A reading older than this holds the endpoint back (the fetches fail or hang).
MAX_AGE_S = 2.0
#: KV-cache use (0 to 1) at which an endpoint counts as saturated: a fifth of the cache is left
#: to the interactive tenants' bursts. The Gateway API inference extension's line (with the
#: gate as it is now, benchmarks/shared_pool.py's figures at 0.8 are in its results file).
KV_SATURATED = 0.8
#: Weight of a new reading in a task's in-flight target (the rest: the target before it). The
#: interactive tenants' requests come and go within their answer time, much faster than one
#: reading a second, so one reading's count is mostly noise; a stream that followed each one
#: would swing its requests up and down about the same mean, and the swings up are what make
#: the tenants wait. A rise of their load still takes half the room away at the next reading.
SMOOTHING = 0.5
#: The room a reading shows where nothing runs (the KV share of a sequence unknown): requests
#: sent on trial, split among the tasks like any room; the next reading measures their share.
IDLE_ROOM = 4
#: Largest /metrics body read (vLLM's is about 50 KiB per model with its histograms).
MAX_METRICS_BYTES = 4 * 1024 * 1024
#: Seconds one /metrics fetch may take.
FETCH_TIMEOUT_S = 2.0
#: Seconds after its last use that an endpoint's reading is forgotten (a replica gone).
FORGET_S = 300.0
#: Seconds before a /metrics that was not vLLM's is read again (then twice as long each time,
#: up to :data:`UNSUPPORTED_MAX_RETRY_S`).
UNSUPPORTED_RETRY_S = 30.0
UNSUPPORTED_MAX_RETRY_S = 600.0
#: The largest request count a reading may hold (summed over engines): past it, the reading
#: is not believed (no server holds a billion requests; 1e308 twice would sum to infinity).
MAX_GAUGE = 1e9

#: GET of one endpoint's ``/metrics`` through the client's transport, the body held to the
#: given number of bytes (:class:`~dspark_json.http.transport.BodyTooLarge` past it):
#: (HTTP status, body).
MetricsFetch = Callable[[int], Awaitable[tuple[int, bytes]]]

_SAMPLE = re.compile(
    r"^vllm:(num_requests_waiting|num_requests_running|kv_cache_usage_perc|gpu_cache_usage_perc)"
    r"(?:\{([^}]*)\})?\s+(\S+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Reading:
    """One endpoint's gauges at ``at`` (``time.monotonic()``)."""

    waiting: float
    running: float
    kv: float
    at: float


class Unreadable(ValueError):
    """A /metrics text with vLLM's gauges whose numbers cannot be believed (not finite, negative,
    a KV use past 1, counts past :data:`MAX_GAUGE`)."""


def parse_gauges(text: str) -> tuple[float, float, float] | None:
    """(waiting, running, KV use) from vLLM's Prometheus text, summed over engines and the
    models they are labelled with (KV use: their mean); ``None`` when the text holds none of
    vLLM's scheduler gauges (not vLLM's /metrics). Raises :class:`Unreadable` where a gauge's
    number is not finite or not plausible: no arithmetic is done on it."""
    sums = {"waiting": 0.0, "running": 0.0}
    kv: dict[str, list[float]] = {"kv_cache_usage_perc": [], "gpu_cache_usage_perc": []}
    found = False
    for match in _SAMPLE.finditer(text):
        name, _, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        found = True
        if name in kv:
            if not 0.0 <= number <= 1.0:  # NaN fails both comparisons too
                raise Unreadable(f"vllm:{name} {value[:40]} (a share from 0 to 1)")
            kv[name].append(number)
        else:
            if not 0.0 <= number <= MAX_GAUGE:
                raise Unreadable(f"vllm:{name} {value[:40]} (a count from 0 to {MAX_GAUGE:g})")
            key = name.removeprefix("num_requests_")
            sums[key] += number
            if sums[key] > MAX_GAUGE:
                raise Unreadable(f"vllm:{name} sums past {MAX_GAUGE:g} over the engines")
    if not found:
        return None
    usage = kv["kv_cache_usage_perc"] or kv["gpu_cache_usage_perc"]
    return sums["waiting"], sums["running"], sum(usage) / len(usage) if usage else 0.0


@dataclass
class _Entry:
    reading: Reading | None = None
    fetched: float = -math.inf  # when the last fetch started (monotonic)
    unsupported_until: float = -math.inf  # not vLLM's: not read again before (monotonic)
    retry_s: float = UNSUPPORTED_RETRY_S  # the next wait after an answer that is not vLLM's
    warned: bool = False
    warned_unreadable: bool = False
    used: float = 0.0  # when a gate last asked for it (monotonic)
    fetching: dict[int, asyncio.Task[None]] = field(default_factory=dict)  # by event loop


class Gauges:
    """The process-wide cache of each endpoint's readings, keyed by its base URL."""

    def __init__(self, refresh_s: float = REFRESH_S) -> None:
        self.refresh_s = refresh_s
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self.fetches = 0

    def _entry(self, url: str) -> _Entry:
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(url)
            if entry is None:  # a new endpoint: forget those no gate asked about for a while
                for old in [u for u, e in self._entries.items() if now - e.used > FORGET_S]:
                    if not self._entries[old].fetching:
                        del self._entries[old]
                entry = self._entries[url] = _Entry()
            entry.used = now
            return entry

    async def read(
        self, url: str, fetch: MetricsFetch, *, route: str = "", first: bool = True
    ) -> Reading | None:
        """The latest reading of the endpoint at ``url`` for requests sent with ``route`` (a
        digest of their headers: :mod:`.readings`), fetched first with ``fetch`` when the last
        fetch is older than the refresh interval; ``None`` where its /metrics is not vLLM's.
        Where there is no reading yet, the first fetch is waited for unless ``first`` is
        false (``None`` then, the fetch going on)."""
        entry = self._entry(f"{url}\n{route}" if route else url)
        now = time.monotonic()
        if now < entry.unsupported_until:
            return None
        loop = id(asyncio.get_running_loop())
        task = entry.fetching.get(loop)
        if task is None and now - entry.fetched >= self.refresh_s:
            entry.fetched = now
            task = asyncio.create_task(self._fetch(url, fetch, entry))
            entry.fetching[loop] = task
            task.add_done_callback(lambda _: entry.fetching.pop(loop, None))
        if task is not None and entry.reading is None and first:
            await asyncio.shield(task)  # the first reading: wait for it
        return None if time.monotonic() < entry.unsupported_until else entry.reading

    async def _fetch(self, url: str, fetch: MetricsFetch, e: _Entry) -> None:
        self.fetches += 1
        started = time.monotonic()
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                status, body = await fetch(MAX_METRICS_BYTES)
            if status in (404, 405):  # no /metrics here: a gateway
                self._unsupported(url, e, f"HTTP {status}")
                return
            if status != 200:  # a 429, a 5xx, a pod restarting: no reading
                e.reading = None
                return
        except BodyTooLarge:
            self._unsupported(url, e, f"over {MAX_METRICS_BYTES} bytes")
            return
        except (httpx.HTTPError, TimeoutError, OSError):
            # Not reachable now, or too slow: no reading (the latency-driven limit paces the
            # requests; a down endpoint is rested by the endpoint pool once a request fails).
            # An old reading kept would hold every request to it until its requestDeadline.
            e.reading = None
            return
        except Exception:  # a reading is advice: nothing about it may fail a row
            logger.debug("Reading %s/metrics failed", url, exc_info=True)
            e.reading = None
            return
        try:
            gauges = parse_gauges(body.decode("utf-8", "replace"))
        except Unreadable as exc:  # +Inf, NaN, 1e308: unknown, never arithmetic
            e.reading = None
            if not e.warned_unreadable:
                e.warned_unreadable = True
                logger.warning(
                    "Option 'maxServerQueue': %s/metrics holds a number that cannot be "
                    "believed: %s; no reading (requests to it are paced by latency until a "
                    "reading is plausible again). Said once per endpoint and process.",
                    url,
                    exc,
                )
            return
        if gauges is None:
            self._unsupported(url, e, "no vllm:num_requests_waiting in it")
            return
        e.retry_s = UNSUPPORTED_RETRY_S
        e.reading = Reading(*gauges, at=started)

    def _unsupported(self, url: str, entry: _Entry, why: str) -> None:
        """Not vLLM's /metrics: no reading; read again after ``entry.retry_s`` (doubling)."""
        entry.reading = None
        entry.unsupported_until = time.monotonic() + entry.retry_s
        entry.retry_s = min(entry.retry_s * 2, UNSUPPORTED_MAX_RETRY_S)
        if not entry.warned:
            entry.warned = True
            logger.warning(
                "Option 'maxServerQueue': %s/metrics is not vLLM's Prometheus metrics (%s); "
                "requests to this endpoint are paced by latency only (a gateway: point option "
                "'endpoint' at the replicas to read their queues). Read again in %gs, then "
                "less often (up to every %gs).",
                url,
                why,
                UNSUPPORTED_RETRY_S,
                UNSUPPORTED_MAX_RETRY_S,
            )


#: One cache per worker process.
GAUGES = Gauges()


@dataclass
class _Budget:
    reading: Reading | None = None
    passed: int = 0  # this task's requests let through the gate and not ended yet
    inflight: int = 0  # of those, the ones sent (past the in-flight limit too)
    target: float | None = None  # requests this task may have in flight (None: no bound)
    start: int = 0  # in flight when the reading came (where the ramp to the target starts)
    since: float = 0.0  # when this task first saw the reading (monotonic)
    rounding: float = 0.5  # added before rounding the target down to whole requests (dither)


def room(reading: Reading, max_queue: int) -> float:
    """How many more requests ``reading`` leaves room for before the endpoint is saturated
    (negative: that many too many). Where nothing runs (or the KV gauge says nothing), the
    share of the cache one sequence takes is not known: :data:`IDLE_ROOM` requests, whose
    next reading tells it, plus the queue (a pool idle at the stream's start took every task's
    whole in-flight limit at once when this was no bound: hundreds of requests queued, for
    seconds, ahead of the interactive tenants' next ones)."""
    queue = max_queue - reading.waiting
    if reading.waiting > max_queue:
        return queue  # more wait than maxServerQueue
    if reading.kv <= 0 or reading.running <= 0:
        return IDLE_ROOM + queue
    # The KV cache's share per running sequence gives the sequences that fit up to the line.
    slots = reading.running * (KV_SATURATED - reading.kv) / reading.kv
    if not math.isfinite(slots):  # a KV use so small the share overflows: all but empty
        return math.inf if slots > 0 else -1.0
    if reading.kv >= KV_SATURATED:
        return min(-1.0, math.floor(slots))
    return math.floor(slots) + queue


def part(free: float, share: readings.Share, shift: int) -> float:
    """The room ``free`` that is one task's: split by this machine's tasks that send to the
    endpoint (``share.count``), whole requests each, the remainder to as many tasks as it holds
    (by rank, turned by ``shift`` each reading so that none waits for good). Where requests are
    too many (``free`` negative), the excess is given back the same way, in whole requests (a
    part of a request each would be lost in the rounding: 32 tasks would give back nothing of
    an excess of 4)."""
    if not math.isfinite(free):
        return free
    amount = math.floor(free) if free >= 0 else math.ceil(-free)  # never more than the room
    whole, remainder = divmod(amount, share.count)
    place = (share.rank + shift) % share.count
    mine = float(whole + (1 if place < remainder else 0))
    return mine if free >= 0 else -mine


def across(share: readings.Share, width: tuple[int, int] | None) -> readings.Share:
    """The tasks that split a reading's room across the cluster: this machine's (``share``,
    its leases), times the ``machines`` that ran the stream's tasks, at most the ``tasks`` that
    ran at once (``width = (machines, tasks)``, learnt by the driver from the last
    micro-batches' metrics records: :func:`dspark_json.source.pool_width`), never fewer than
    this machine's. ``share`` as is without a width (a batch read, the first micro-batch)."""
    if width is None:
        return share
    machines, most = width
    count = max(share.count, min(share.count * max(machines, 1), most))
    return readings.Share(count, share.rank)


def target(previous: float | None, inflight: int, free: float, queued: bool) -> float | None:
    """This task's in-flight target after a reading that leaves ``free`` room while it has
    ``inflight`` requests out (``None``: no bound, a KV use too small to divide). Where
    requests queue beyond ``maxServerQueue`` (``queued``), at once what the reading allows if
    that is lower; else :data:`SMOOTHING` of the way from ``previous`` to it."""
    if free == math.inf:
        return None
    alone = max(inflight + free, 0.0)
    if previous is None:
        return alone
    if queued:
        return min(previous, alone)
    return previous + SMOOTHING * (alone - previous)


class Gate:
    """One task's hold on new requests, by endpoint (see the module's docstring)."""

    def __init__(
        self,
        max_queue: int,
        gauges: Gauges = GAUGES,
        *,
        tasks: Callable[[str, str], readings.Share] | None = None,
        route: str = "",
        width: tuple[int, int] | None = None,
    ) -> None:
        self.max_queue = max_queue
        self.gauges = gauges
        #: The digest of the headers the task's requests carry (option requestHeaders): its
        #: readings and leases are those of the tasks that send with the same (http.readings).
        self.route = route
        #: (machines, tasks at once) of the stream's cluster, or None: :func:`across`.
        self.width = width
        #: This machine's tasks that send to an endpoint (``http.readings.tasks``).
        self.tasks = tasks or (lambda url, task: readings.tasks(url, task, route=route))
        self.name = f"{os.getpid()}-{id(self):x}"  # this task's lease among the machine's
        #: Where this task rounds its target up to a whole request, where several tasks split
        #: the room (:meth:`_allowed`): its own point in [0, 1), drawn once.
        self.dither = random.random()
        self._budgets: dict[str, _Budget] = {}
        #: Set when a request of this task ends (then replaced): the held requests look again.
        self._changed = asyncio.Event()
        self.held_s = 0.0

    async def wait(
        self,
        url: str,
        fetch: MetricsFetch,
        limit_s: float,
        also: Sequence[tuple[str, MetricsFetch]] = (),
    ) -> str:
        """Return the endpoint a new request goes to: ``url`` once it has room for one (at
        once where it has no reading), else the first of ``also`` (other endpoints, with their
        fetches) whose reading shows room (one with no reading is never chosen: no room is
        seen there); ``url`` after ``limit_s`` (a gate never fails a row). Counts the time
        held. ``fetch`` reads the endpoint's /metrics where the reading is due (the requests'
        model does not matter: the module's docstring). Why a held request may go elsewhere:
        docs/explanation/gate.md."""
        choices = [(url, fetch), *also]
        started = time.monotonic()
        deadline = started + max(limit_s, 0.0)
        while True:
            chosen, next_step, seen = None, math.inf, None
            for where, read in choices:
                budget = self._budgets.setdefault(where, _Budget())
                # Another endpoint's first fetch is not waited for: a down one would hold the
                # request (up to the fetch's timeout) where the endpoint asked for had room.
                reading = await self.gauges.read(where, read, route=self.route, first=where == url)
                if reading is None:
                    if where != url:
                        continue  # no reading elsewhere (failed, or not vLLM's): no room seen
                    chosen = where  # no reading of the endpoint asked for: not held
                    break
                now = time.monotonic()
                if reading is not budget.reading:
                    self._read(where, budget, reading, now)
                stale = now - reading.at > MAX_AGE_S
                if not stale and budget.passed < self._allowed(budget, now):
                    chosen = where
                    break
                if where == url:
                    seen = reading
                step = max(reading.at + self.gauges.refresh_s - now, 0.01)
                if budget.target is not None and budget.target > budget.start:  # paced
                    step = min(step, self.gauges.refresh_s / (budget.target - budget.start))
                next_step = min(next_step, step)
            if chosen is not None:
                break
            now = time.monotonic()
            if now >= deadline:
                chosen = url
                break
            if seen is not None:
                phase(
                    ("held", url, self.max_queue),
                    "Held by the pool: %s is at the stream's share of its room (%d request(s) "
                    "waiting, maxServerQueue=%d; KV cache %.0f%% in use, line %.0f%%): new "
                    "requests go out as room frees; the seconds held are in the metrics.",
                    mask_uris(url),
                    seen.waiting,
                    self.max_queue,
                    seen.kv * 100,
                    KV_SATURATED * 100,
                )
            changed = self._changed
            try:
                async with asyncio.timeout(min(next_step, deadline - now)):
                    await changed.wait()
            except TimeoutError:
                pass
        self._budgets[chosen].passed += 1
        self.held_s += time.monotonic() - started
        return chosen

    def _read(self, url: str, budget: _Budget, reading: Reading, now: float) -> None:
        """A new reading of ``url``: this task's part of its room moves the target."""
        shift = int(time.time() / self.gauges.refresh_s) + readings.MACHINE
        share = across(self.tasks(url, self.name), self.width)
        free = part(room(reading, self.max_queue), share, shift)
        budget.rounding = 0.5 if share.count == 1 else self.dither
        queued = reading.waiting > self.max_queue
        budget.target = target(budget.target, budget.inflight, free, queued)
        budget.reading, budget.since, budget.start = reading, now, budget.inflight

    def _allowed(self, budget: _Budget, now: float) -> float:
        """Requests this task may have in flight at ``now``: the target, reached at once when
        it is lower than what was in flight at the reading, else by a ramp over the refresh
        interval (so that the stream's requests start, and so end, spread out, not in one
        burst a reading). In whole requests: one task alone rounds half up; where several
        split the room, each rounds at its own point (:attr:`dither`), so that their whole
        requests add up to the sum of their targets on average. Half up for all of them put
        the stream far past the room with many tasks: 32 tasks each with a target of 0.5 (the
        room's line over them) had 32 requests out, not 16, and the replicas' queues burst."""
        if budget.target is None:
            return math.inf
        level = budget.target
        if level > budget.start:
            share = min(1.0, (now - budget.since) / self.gauges.refresh_s)
            level = budget.start + (level - budget.start) * share
        return math.floor(level + budget.rounding)

    def sent(self, url: str) -> None:
        """A request let through to ``url`` is sent now (it also had to wait for the task's
        in-flight limit): the readings' room is counted from the requests really out, not from
        those still waiting for the limit, which would otherwise all go at once when it grows."""
        self._budgets[url].inflight += 1

    def close(self) -> None:
        """The task sends no more: its leases go (http.readings.release)."""
        for url in self._budgets:
            readings.release(url, self.name, route=self.route)

    def ended(self, url: str) -> None:
        """A request to ``url`` ended: its place is free for the next one (the requests held
        look again, whatever endpoint they wait for: they may go to this one)."""
        budget = self._budgets.get(url)
        if budget is not None:
            budget.passed -= 1
            budget.inflight -= 1
            self._changed.set()
            self._changed = asyncio.Event()
