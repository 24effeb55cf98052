"""Option maxServerQueue: vLLM's /metrics read (tests/data/vllm-metrics.txt: written in vLLM's
Prometheus format, names and labels, two engines and a second model), and the gate that holds
new requests back while an endpoint is saturated, against raw servers."""

import json
import logging
import threading
import time
from pathlib import Path

import pytest

from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.gauges import IDLE_ROOM, KV_SATURATED, Reading, parse_gauges, room
from dspark_json.http.options import HttpOptions
from dspark_json.options import Options
from tests.raw_servers import Request, completion, raw_server, response

VLLM_TEXT = (Path(__file__).parent.parent / "data" / "vllm-metrics.txt").read_text()


def metrics(waiting: float, running: float, kv: float) -> str:
    return (
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}\n'
    )


def test_parse_vllm_text_sums_engines_and_models():
    # Two engines of Qwen (waiting 3 + 4, running 16 + 12, KV 0.5 and 0.7), one of another
    # model: the endpoint's load, whatever model a request waiting for it asks for.
    assert parse_gauges(VLLM_TEXT) == (8.0, 30.0, pytest.approx((0.5 + 0.7 + 0.25) / 3))


def test_parse_older_vllm_gpu_cache_and_not_vllm():
    old = metrics(2, 3, 0).replace("kv_cache_usage_perc", "gpu_cache_usage_perc")
    old = old.replace(" 0\n", " 0.95\n")
    assert parse_gauges(old) == (2.0, 3.0, 0.95)
    assert parse_gauges("# HELP up gauge\nup 1\n") is None
    assert parse_gauges('{"error": "not found"}') is None


def test_room_is_the_free_kv_share_plus_the_queue():
    assert room(Reading(0, 8, 0.5, 0), 0) == 4  # 8 seqs are 0.5: 12.8 fit below 0.8
    assert room(Reading(0, 0, 0.0, 0), 0) == IDLE_ROOM  # idle: a trial, its share unknown
    assert room(Reading(0, 0, 0.0, 0), 2) == IDLE_ROOM + 2
    assert room(Reading(3, 16, 1.0, 0), 1) == -2  # more wait than maxServerQueue
    assert room(Reading(0, 16, 1.0, 0), 5) < 0  # KV full
    assert room(Reading(0, 8, 0.5, 0), 2) == 6  # and 2 may wait
    assert KV_SATURATED == 0.8


def test_option_max_server_queue():
    options = Options.parse({"endpoint": "http://h:1", "prompts": "/p", "maxServerQueue": "3"})
    assert options.http.max_server_queue == 3
    assert Options.parse({"endpoint": "http://h:1", "prompts": "/p"}).http.max_server_queue is None


class Pool:
    """A raw server whose /metrics says what ``state`` holds; it records when completions and
    /metrics requests came."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.metrics_status = 200
        self.sent: list[float] = []
        self.reads: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, request: Request) -> bytes | None:
        if request.path == "/metrics":
            self.reads.append(time.monotonic())
            return response(self.metrics_status, self.text)
        if request.path == "/health":
            return response(200, {})
        self.sent.append(time.monotonic())
        return response(200, completion(json.dumps({"a": 1})))


def test_gate_holds_new_requests_while_saturated_and_releases_when_it_clears(caplog):
    caplog.set_level(logging.INFO, logger="dspark_json.phases")
    pool = Pool(metrics(5, 16, 1.0))  # 5 waiting > maxServerQueue 0: saturated
    with raw_server(pool) as server:
        config = HttpOptions(endpoints=(Endpoint(server.url),), max_server_queue=0)
        started = time.monotonic()
        clear_at = started + 2.0

        def clear() -> None:
            time.sleep(2.0)
            pool.text = metrics(0, 0, 0.0)

        threading.Thread(target=clear, daemon=True).start()
        fetched = complete_all([{"messages": [], "i": i} for i in range(20)], config)
    assert len(pool.sent) == 20 and fetched.stats.failed == 0
    assert min(pool.sent) >= clear_at  # nothing sent while saturated
    assert min(pool.sent) - clear_at < 1.6  # released within a reading of it clearing
    assert fetched.stats.held_s > 1.5
    # The phase is said once, at INFO (dspark_json/phases.py), however many requests it held.
    (held,) = [r for r in caplog.records if "Held by the pool" in r.getMessage()]
    assert held.levelname == "INFO"
    assert f"{server.url} is at the stream's share of its room (5 request(s) waiting, " in (
        held.getMessage()
    )
    assert "maxServerQueue=0; KV cache 100% in use, line 80%)" in held.getMessage()
    # At most one /metrics read a second (and the first at once).
    elapsed = max(pool.reads) - min(pool.reads)
    assert len(pool.reads) <= elapsed / 1.0 + 1.5


def test_a_metrics_fetch_that_fails_after_a_saturated_reading_holds_nothing():
    """/metrics that starts failing (a 503 here; a timeout or a reset alike) leaves no reading:
    requests go out paced by the latency-driven limit, not held until requestDeadline by the
    last, ever older reading."""
    pool = Pool(metrics(5, 16, 1.0))  # saturated
    with raw_server(pool) as server:
        config = HttpOptions(
            endpoints=(Endpoint(server.url),), max_server_queue=0, request_deadline=30.0
        )

        def fail() -> None:
            time.sleep(1.0)
            pool.metrics_status = 503

        threading.Thread(target=fail, daemon=True).start()
        started = time.monotonic()
        fetched = complete_all([{"messages": [], "i": i} for i in range(5)], config)
    assert len(pool.sent) == 5 and fetched.stats.failed == 0
    assert max(pool.sent) - started < 5.0  # not held for the deadline (30 s)


def test_an_endpoint_without_metrics_gets_one_warning_and_its_requests(caplog, monkeypatch):
    from dspark_json.http.gauges import GAUGES

    monkeypatch.setattr(GAUGES, "refresh_s", 0.0)  # every request would read it again

    def gateway(request: Request) -> bytes | None:
        if request.path == "/metrics":
            return response(404, {"error": "Not Found"})
        return response(200, completion("{}"))

    with raw_server(gateway) as server, caplog.at_level(logging.WARNING, "dspark_json"):
        config = HttpOptions(endpoints=(Endpoint(server.url),), max_server_queue=0)
        first = complete_all([{"messages": []}] * 10, config)
        second = complete_all([{"messages": []}] * 10, config)
        metric_reads = server.paths().count("/metrics")
    warnings = [r for r in caplog.records if "maxServerQueue" in r.getMessage()]
    assert len(warnings) == 1 and f"{server.url}/metrics" in warnings[0].getMessage()
    assert first.stats.failed == second.stats.failed == 0
    assert first.stats.statuses == {"200": 10} and second.stats.statuses == {"200": 10}
    assert metric_reads == 1  # a gateway is not asked again in this process


def test_a_metrics_body_over_the_limit_is_not_read_and_fails_nothing(monkeypatch):
    import dspark_json.http.gauges as gauges

    monkeypatch.setattr(gauges, "MAX_METRICS_BYTES", 1000)
    pool = Pool(metrics(0, 0, 0.0) + "# padding\n" * 500)
    with raw_server(pool) as server:
        config = HttpOptions(endpoints=(Endpoint(server.url),), max_server_queue=0)
        fetched = complete_all([{"messages": []}] * 5, config)
    assert fetched.stats.failed == 0 and len(pool.sent) == 5


def test_a_reading_moves_the_target_half_way_and_a_queue_lowers_it_at_once():
    from dspark_json.http.gauges import SMOOTHING, target

    assert target(None, 3, 4, False) == 7  # the first reading: what it allows
    assert target(None, 3, float("inf"), False) is None  # idle: no bound
    # The tenants' load swings within a reading: half of the way only, up or down.
    assert SMOOTHING == 0.5
    assert target(7, 3, 8, False) == 9
    assert target(7, 5, -3, False) == 4.5  # over the KV line, nothing queued
    # Requests queue beyond maxServerQueue: at once what the reading allows.
    assert target(7, 5, -3, True) == 2
    assert target(1, 5, 3, True) == 1  # a queue never raises it
    assert target(7, 2, -5, True) == 0  # never below nothing


class FakeGauges:
    """The readings a test sets, without /metrics."""

    refresh_s = 1.0

    def __init__(self) -> None:
        self.reading: Reading | None = None

    async def read(
        self, url: str, fetch: object, route: str = "", first: bool = True
    ) -> Reading | None:
        return self.reading


def test_the_target_counts_requests_sent_not_those_waiting_for_the_in_flight_limit():
    """Workers let through the gate that still wait for the task's in-flight limit are not out
    on the server: the next reading's room is added to the requests really sent, so that when
    the limit grows they do not all go at once."""
    import asyncio

    from dspark_json.http.gauges import Gate

    async def scenario() -> tuple[float | None, float | None]:
        gauges = FakeGauges()
        gate = Gate(0, gauges)  # type: ignore[arg-type]
        now = time.monotonic()
        gauges.reading = Reading(0, 2, 2 / 16, now)  # 2 running of 16: room 10
        for _ in range(10):  # ten let through in a burst (the ramp is the next test's)
            await gate.wait("u", {}, 5.0)
        first = gate._budgets["u"].target
        for _ in range(3):  # only three got past the in-flight limit
            gate.sent("u")
        gauges.reading = Reading(0, 12, 12 / 16, time.monotonic())  # room 0 (12.8 fit)
        await gate.wait("u", {}, 0.0)
        return first, gate._budgets["u"].target

    first, second = asyncio.run(scenario())
    assert first == 10
    assert second == 10 + 0.5 * (3 - 10)  # counted from the 3 sent, not the 10 let through


def test_the_gate_ramps_up_to_a_higher_target_over_a_reading_and_holds_above_it():
    import asyncio

    from dspark_json.http.gauges import Gate

    async def scenario() -> tuple[list[float], bool]:
        gauges = FakeGauges()
        gate = Gate(0, gauges)  # type: ignore[arg-type]
        gauges.reading = Reading(0, 4, 4 / 16, time.monotonic())  # room 8
        started = time.monotonic()
        times = []
        for _ in range(8):
            await gate.wait("u", {}, 5.0)
            gate.sent("u")
            times.append(time.monotonic() - started)
        # The ninth waits: the target is 8 in flight (until one ends or the limit is spent).
        held = time.monotonic()
        await gate.wait("u", {}, 0.3)
        return times, time.monotonic() - held >= 0.29

    times, held = asyncio.run(scenario())
    assert times[0] < 0.2 and times[-1] > 0.75  # spread over the reading, not in one burst
    assert held


def test_the_client_keeps_the_room_a_steady_reading_shows_in_flight():
    """Another tenant keeps 4 of the server's 16 sequences; /metrics counts ours with them:
    the task keeps about 8 in flight (12.8 fit below the KV line; one or two more at times:
    those in transit when /metrics was read are not on the server yet; 10 seen on a loaded
    machine) to the end. The client tells the gate which requests it sent; without that, every
    request that ends lowers the gate's count of those out, and the target it derives from each
    reading sinks towards nothing."""
    pool = Pool(metrics(0, 4, 0.25))
    in_flight, peaks = [0], []
    lock = threading.Lock()

    def handler(request: Request) -> bytes | None:
        if request.path == "/metrics":
            with lock:
                running = 4 + in_flight[0]
            pool.text = metrics(0, running, running / 16)
        if request.path != "/v1/chat/completions":
            return pool(request)
        with lock:
            in_flight[0] += 1
            peaks.append(in_flight[0])
        time.sleep(0.3)
        with lock:
            in_flight[0] -= 1
        return pool(request)

    with raw_server(handler) as server:
        config = HttpOptions(
            endpoints=(Endpoint(server.url),), max_server_queue=0, request_deadline=10.0
        )
        started = time.monotonic()
        fetched = complete_all([{"messages": [], "i": i} for i in range(120)], config)
        elapsed = time.monotonic() - started
    assert fetched.stats.failed == 0 and len(pool.sent) == 120
    assert max(peaks) <= 10  # the room, and up to two in transit on a loaded machine
    assert max(peaks[-30:]) >= 6  # still using it at the end
    assert elapsed < 8.0  # 120 x 0.3 s at about 8 at once: 4.5 s and the first ramp


def test_metrics_go_through_the_client_transport_with_the_tls_name_of_an_address():
    """An https name expanded to its addresses (resolveEndpoints): /metrics is read like the
    requests, through the client's transport (its TLS settings), with the name as TLS server
    name and Host header; a separate HTTP client would check the certificate against the
    address, fail, and leave the gate off."""
    import httpx

    seen: list[tuple[str, str, str | None]] = []
    sent: list[float] = []
    saturated_until = time.monotonic() + 1.5

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            seen.append(
                (
                    request.url.host,
                    request.headers["host"],
                    request.extensions.get("sni_hostname"),
                )
            )
            full = time.monotonic() < saturated_until
            return httpx.Response(200, text=metrics(5, 16, 1.0) if full else metrics(0, 0, 0.0))
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={})
        sent.append(time.monotonic())
        return httpx.Response(200, json=completion(json.dumps({"a": 1})))

    address = Endpoint("https://10.0.0.1:8443", host="pool.test:8443")
    config = HttpOptions(endpoints=(address,), max_server_queue=0, prefix_order=False)
    fetched = complete_all(
        [{"messages": [], "i": i} for i in range(4)], config, transport=httpx.MockTransport(handler)
    )
    assert fetched.stats.failed == 0 and len(sent) == 4
    assert seen and set(seen) == {("10.0.0.1", "pool.test:8443", "pool.test")}
    assert min(sent) >= saturated_until  # held by the readings read that way


def test_readings_of_endpoints_unused_for_a_while_are_forgotten(monkeypatch):
    """Pod addresses come and go: a process keeps the readings of those used lately only."""
    import asyncio

    from dspark_json.http import gauges as module

    cache = module.Gauges()

    async def fetch(limit: int) -> tuple[int, bytes]:
        return 200, metrics(0, 1, 0.1).encode()

    async def scenario() -> None:
        await cache.read("http://10.0.0.1:8000", fetch)
        await cache.read("http://10.0.0.2:8000", fetch)
        cache._entries["http://10.0.0.1:8000"].used -= module.FORGET_S + 1
        await cache.read("http://10.0.0.3:8000", fetch)

    asyncio.run(scenario())
    assert set(cache._entries) == {"http://10.0.0.2:8000", "http://10.0.0.3:8000"}


def test_a_saturated_https_replica_reached_by_address_is_held_checking_its_name(
    tmp_path, monkeypatch
):
    """A real TLS server whose certificate names pool.test only, reached at 127.0.0.1 as an
    address pool.test resolved to: /metrics is read with the name as TLS server name (a fetch
    that checked the certificate against the address failed, and the gate was silently off),
    and the requests wait while it shows the replica saturated."""
    import ssl
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.http.conftest import self_signed

    cert, key = self_signed(tmp_path, "pool.test")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client's SSL context trusts it
    clear_at = time.monotonic() + 2.0
    sent: list[float] = []
    reads: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def answer(self, text: str, kind: str = "application/json") -> None:
            data = text.encode()
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/metrics":
                reads.append(time.monotonic())
                full = time.monotonic() < clear_at
                self.answer(metrics(5, 16, 1.0) if full else metrics(0, 0, 0.0), "text/plain")
            else:
                self.answer("{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            sent.append(time.monotonic())
            self.answer(json.dumps(completion(json.dumps({"a": 1}))))

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = Endpoint(f"https://127.0.0.1:{port}", host=f"pool.test:{port}")
        config = HttpOptions(endpoints=(address,), max_server_queue=0, prefix_order=False)
        fetched = complete_all([{"messages": [], "i": i} for i in range(4)], config)
    finally:
        server.shutdown()
        server.server_close()
    assert fetched.stats.failed == 0 and len(sent) == 4
    assert reads  # /metrics was read, its certificate checked for pool.test
    assert min(sent) >= clear_at  # and held the requests while it showed the replica full


@pytest.mark.parametrize(
    "text",
    [
        metrics(0, 4, float("inf")),  # vllm:kv_cache_usage_perc +Inf
        metrics(0, float("inf"), 0.5),  # running +Inf
        metrics(float("nan"), 4, 0.5),
        metrics(1e308, 4, 0.5) + 'vllm:num_requests_waiting{engine="1",model_name="m"} 1e308\n',
        metrics(-3, 4, 0.5),
        metrics(0, 4, 5e-324),  # a KV share so small the room overflows: checked in room()
    ],
    ids=["kv-inf", "running-inf", "nan", "sum-to-inf", "negative", "tiny-kv"],
)
def test_a_gauge_that_is_not_a_plausible_number_is_unknown_and_fails_no_row(text, caplog):
    """Issue 53: a +Inf gauge made the gate's floor NaN and the query died with 0 rows. A
    number that cannot be believed is no reading: one WARN naming the endpoint, every row
    answered."""
    pool = Pool(text)
    with raw_server(pool) as server, caplog.at_level(logging.WARNING, "dspark_json"):
        config = HttpOptions(
            endpoints=(Endpoint(server.url),), max_server_queue=2, request_deadline=10.0
        )
        fetched = complete_all([{"messages": [], "i": i} for i in range(12)], config)
    assert fetched.stats.failed == 0 and len(pool.sent) == 12
    said = [r.getMessage() for r in caplog.records if "cannot be believed" in r.getMessage()]
    if "e-324" in text:
        assert said == []  # plausible numbers; the room they leave is computed without overflow
    else:
        assert len(said) == 1 and f"{server.url}/metrics" in said[0]


def test_parse_refuses_numbers_it_cannot_believe():
    from dspark_json.http.gauges import Unreadable

    for text in (metrics(0, 1, 1.5), metrics("+Inf", 1, 0.5), metrics(0, 1, "NaN")):
        with pytest.raises(Unreadable):
            parse_gauges(text)
    assert room(Reading(0, 1e9, 5e-324, 0), 0) == float("inf")


def test_an_answer_that_is_not_vllms_is_read_again_later(monkeypatch):
    """One non-vLLM /metrics answer (a pod restarting behind a proxy) no longer turns the gate
    off for good in that worker: it is read again after a back-off, and the gate holds again."""
    import asyncio

    from dspark_json.http import gauges as module

    clock = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    answers = [b"<html>proxy</html>", metrics(5, 16, 1.0).encode(), b"<html>again</html>"]
    cache = module.Gauges()

    async def fetch(limit: int) -> tuple[int, bytes]:
        return 200, answers.pop(0)

    async def scenario() -> list[object]:
        seen = [await cache.read("u", fetch)]  # not vLLM's: no reading
        clock[0] += 5
        seen.append(await cache.read("u", fetch))  # within the back-off: not read again
        clock[0] += module.UNSUPPORTED_RETRY_S
        seen.append(await cache.read("u", fetch))  # read again: a reading
        clock[0] += 1.0
        seen.append(await cache.read("u", fetch))  # not vLLM's again
        await asyncio.sleep(0)
        return seen

    seen = asyncio.run(scenario())
    assert seen[0] is None and seen[1] is None
    assert isinstance(seen[2], Reading) and seen[2].waiting == 5
    assert answers == []  # each answer read, none twice
    assert cache._entries["u"].retry_s == module.UNSUPPORTED_RETRY_S * 2  # the next, longer


def test_many_tasks_round_their_targets_to_whole_requests_without_adding_up_past_them():
    """32 tasks of one machine, each with a target of 0.5 request at an endpoint (the room's
    line split 32 ways, smoothed): their whole requests add up to about 16, not 32 (each
    rounding half up sent 32, and the replicas' queues burst); one task alone rounds half up."""
    import random

    from dspark_json.http.gauges import Gate, _Budget

    random.seed(7)
    gates = [Gate(0) for _ in range(32)]
    now = time.monotonic()
    allowed = [
        gate._allowed(_Budget(target=0.5, rounding=gate.dither), now)  # type: ignore[attr-defined]
        for gate in gates
    ]
    assert 10 <= sum(allowed) <= 22, allowed
    assert Gate(0)._allowed(_Budget(target=0.5), now) == 1  # alone: half up, as ever
    assert Gate(0)._allowed(_Budget(target=3.0, rounding=0.99), now) == 3  # whole: whole


def test_a_request_held_at_a_full_endpoint_goes_to_another_with_room():
    """Two replicas, one saturated the whole time: the requests go to the one with room, none
    waits at the full one's gate (each worker picked the endpoints in turn and stayed held
    where its turn fell: half of them until requestDeadline, while the other replica idled)."""
    full, free = Pool(metrics(5, 16, 1.0)), Pool(metrics(0, 2, 2 / 16))
    with raw_server(full) as a, raw_server(free) as b:
        config = HttpOptions(
            endpoints=(Endpoint(a.url), Endpoint(b.url)), max_server_queue=0, request_deadline=3.0
        )
        started = time.monotonic()
        fetched = complete_all([{"messages": [], "i": i} for i in range(20)], config)
        took = time.monotonic() - started
    assert fetched.stats.failed == 0
    assert len(full.sent) == 0 and len(free.sent) == 20
    assert took < 2.5  # none held until requestDeadline


def test_the_gate_takes_the_endpoint_asked_for_where_it_has_room():
    import asyncio

    from dspark_json.http.gauges import Gate

    class TwoReadings:
        refresh_s = 1.0

        def __init__(self) -> None:
            self.readings = {"a": Reading(0, 2, 2 / 16, time.monotonic())}

        async def read(
            self, url: str, fetch: object, route: str = "", first: bool = True
        ) -> Reading | None:
            return self.readings[url]

    async def scenario() -> list[str]:
        gauges = TwoReadings()
        gauges.readings["b"] = Reading(0, 2, 2 / 16, time.monotonic())
        gate = Gate(0, gauges)  # type: ignore[arg-type]
        chosen = [await gate.wait("a", {}, 1.0, [("b", {})])]  # type: ignore[list-item]
        gauges.readings["a"] = Reading(3, 16, 1.0, time.monotonic())  # a full, b not
        chosen.append(await gate.wait("a", {}, 1.0, [("b", {})]))  # type: ignore[list-item]
        return chosen

    assert asyncio.run(scenario()) == ["a", "b"]


def test_an_idle_pool_gets_a_trial_of_requests_not_every_tasks_whole_limit():
    """At a stream's start the replicas are idle: a reading with nothing running says nothing
    of the KV share a sequence takes. The tasks together get IDLE_ROOM requests on trial, the
    next reading measures their share. (No bound there let each of 32 tasks send its whole
    in-flight limit at once: 400 requests queued at one replica for 10 s, ahead of the
    interactive tenants' next ones, traced in docs/explanation/gate.md.)"""
    import asyncio

    from dspark_json.http import readings
    from dspark_json.http.gauges import Gate

    class Idle:
        # The remainder's places turn with each refresh period (gauges.part's shift): a period
        # of days keeps the 32 tasks' places from turning between them.
        refresh_s = 1e6

        async def read(
            self, url: str, fetch: object, route: str = "", first: bool = True
        ) -> Reading | None:
            return Reading(0, 0, 0.0, time.monotonic())

    async def allowed(tasks: int) -> float:
        total = 0.0
        for rank in range(tasks):
            share = readings.Share(tasks, rank)
            gate = Gate(0, Idle(), tasks=lambda url, task, share=share: share)  # type: ignore[arg-type, misc]
            await gate.wait("a", {}, 0.0)  # type: ignore[arg-type]  # read, not held
            later = time.monotonic() + 5 * Idle.refresh_s  # the ramp done
            total += gate._allowed(gate._budgets["a"], later)
        return total

    assert asyncio.run(allowed(1)) == IDLE_ROOM
    assert asyncio.run(allowed(32)) == IDLE_ROOM  # the trial split, not taken 32 times


def test_a_held_request_never_goes_to_another_endpoint_with_no_reading():
    """The endpoint asked for is full; the other's /metrics fails (a replica restarting, down,
    or a gateway): no room is seen there, so the request stays held at the full one (a failed
    reading of the endpoint asked for lets its request through; one of another endpoint sent
    every held request there at once). Its first fetch is not waited for either."""
    import asyncio

    from dspark_json.http import readings
    from dspark_json.http.gauges import Gate, Gauges

    async def full(limit: int) -> tuple[int, bytes]:
        return 200, metrics(5, 16, 1.0).encode()

    async def down(limit: int) -> tuple[int, bytes]:
        return 503, b"restarting"

    async def hanging(limit: int) -> tuple[int, bytes]:
        await asyncio.sleep(30)
        return 200, b""

    async def scenario(other: object) -> tuple[str, float]:
        gate = Gate(0, Gauges(), tasks=lambda url, task: readings.Share(1, 0))
        started = time.monotonic()
        chosen = await gate.wait("http://a", full, 1.0, [("http://b", other)])  # type: ignore[list-item]
        return chosen, time.monotonic() - started

    for other in (down, hanging):
        chosen, took = asyncio.run(scenario(other))
        assert chosen == "http://a"  # held to its deadline at the endpoint asked for
        assert 0.9 < took < 1.5  # not past the deadline waiting for the other's fetch
