"""The simulator as a shared vLLM replica: its /metrics gauges, its queue's order under
``--scheduling-policy priority``, and the 400 vLLM gives a priority under fcfs."""

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from dspark_json.dev.simulator import Faults, Scheduler, Simulator
from dspark_json.http.gauges import parse_gauges

BODY = {"model": "dspark-sim", "messages": [{"role": "user", "content": "x"}]}


def test_fcfs_refuses_a_priority_as_vllm_does(simulator):
    answer = httpx.post(
        f"{simulator.url}/v1/chat/completions", json={**BODY, "priority": 10}, timeout=10
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["message"] == "Got priority 10 but Priority scheduling is not enabled."
    assert error["type"] == "BadRequestError" and error["code"] == 400
    # priority 0 is what every request has: accepted.
    zero = httpx.post(f"{simulator.url}/v1/chat/completions", json={**BODY, "priority": 0})
    assert zero.status_code == 200


class GatedSimulator(Simulator):
    """The simulator in this process, each admitted request held until the test opens the
    gate: what a test sees of the queue does not hang on how fast the machine is (a request
    of a fixed latency could end before the others arrived on a loaded machine)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = asyncio.Event()
        self.admitted: list[str] = []  # each request's prompt, in the order admitted

    async def _work(self, slow: bool, body: bytes, call: int) -> tuple[int, Any]:
        self.admitted.append(json.loads(body)["messages"][0]["content"])
        await self.gate.wait()
        return await super()._work(slow, body, call)


def complete(server: Simulator, text: str, model: str = "dspark-sim", **more: Any) -> Any:
    """A completion request to ``server`` (a coroutine): ``text`` is its prompt."""
    body = {"model": model, "messages": [{"role": "user", "content": text}], **more}
    return server.route("POST", "/v1/chat/completions", json.dumps(body).encode())


async def until(condition: Callable[[], bool]) -> None:
    """Let the event loop run until ``condition`` holds (steps of the loop, not wall time)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the simulator never got there")


async def metrics(server: Simulator) -> str:
    reply = await server.route("GET", "/metrics", b"")
    return str(reply.payload)


def test_metrics_show_running_waiting_and_kv_use_with_vllm_names():
    """Six requests held on a capacity of 2: 2 run, 4 wait, KV use 1.0; then all zero."""

    async def load() -> tuple[str, str]:
        server = GatedSimulator(faults=Faults(capacity=2))
        sent = [asyncio.create_task(complete(server, f"p{i}")) for i in range(6)]
        await until(lambda: server.scheduler.waiting == 4)
        busy = await metrics(server)
        server.gate.set()
        await asyncio.gather(*sent)
        return busy, await metrics(server)

    busy, idle = asyncio.run(load())
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        assert f"# TYPE vllm:{name} gauge" in busy
        assert f"# HELP vllm:{name} " in busy
    assert 'vllm:num_requests_waiting{engine="0",model_name="dspark-sim"} 4.0' in busy
    assert 'vllm:num_requests_running{engine="0",model_name="dspark-sim"} 2.0' in busy
    assert parse_gauges(busy) == (4.0, 2.0, 1.0)
    assert parse_gauges(idle) == (0.0, 0.0, 0.0)


def test_priority_policy_admits_waiting_requests_by_priority_then_arrival():
    """One request holds the only place; then 5, 1, 5, 0 arrive in that order: they are
    admitted 0, 1, then the two 5s in arrival order."""

    async def order() -> list[str]:
        server = GatedSimulator(faults=Faults(capacity=1, scheduling_policy="priority"))
        sent = [asyncio.create_task(complete(server, "first", priority=9))]
        await until(lambda: server.scheduler.running == 1)
        for waiting, (name, priority) in enumerate((("a5", 5), ("b1", 1), ("c5", 5), ("d0", 0))):
            sent.append(asyncio.create_task(complete(server, name, priority=priority)))
            await until(lambda n=waiting + 1: server.scheduler.waiting == n)
        server.gate.set()
        replies = await asyncio.gather(*sent)
        assert [reply.status for reply in replies] == [200] * 5
        return server.admitted

    assert asyncio.run(order()) == ["first", "d0", "b1", "a5", "c5"]


def test_fcfs_scheduler_keeps_arrival_order():
    async def run() -> list[int]:
        scheduler, ran = Scheduler(1, "fcfs"), []
        await scheduler.acquire()

        async def one(i: int, priority: int) -> None:
            await scheduler.acquire(priority)
            ran.append(i)
            scheduler.release()

        tasks = [asyncio.create_task(one(i, p)) for i, p in enumerate((5, 0, 3))]
        await asyncio.sleep(0)
        assert scheduler.waiting == 3 and scheduler.running == 1
        scheduler.release()
        await asyncio.gather(*tasks)
        assert scheduler.running == 0 and scheduler.waiting == 0
        return ran

    assert asyncio.run(run()) == [0, 1, 2]


def test_a_cancelled_waiting_request_leaves_the_queue():
    async def run() -> None:
        scheduler = Scheduler(1, "priority")
        await scheduler.acquire()
        waiting = asyncio.create_task(scheduler.acquire(0))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert scheduler.waiting == 0
        scheduler.release()
        assert scheduler.running == 0

    asyncio.run(run())


def test_metrics_give_a_series_per_served_model_sharing_one_kv_gauge():
    """Served models a and b (capacity 2): 2 a then 3 b arrive: a's series shows 2 running,
    b's 3 waiting; each series holds the whole KV use (the models share the capacity), so the
    sum over models is the server's, as parse_gauges reads it without a model."""

    async def load() -> str:
        server = GatedSimulator(model="a,b", faults=Faults(capacity=2))
        sent = [
            asyncio.create_task(complete(server, f"x{i}", model=model))
            for i, model in enumerate("aabbb")
        ]
        await until(lambda: server.scheduler.running == 2 and server.scheduler.waiting == 3)
        busy = await metrics(server)
        server.gate.set()
        await asyncio.gather(*sent)
        return busy

    busy = asyncio.run(load())
    assert 'vllm:num_requests_running{engine="0",model_name="a"} 2.0' in busy
    assert 'vllm:num_requests_running{engine="0",model_name="b"} 0.0' in busy
    assert 'vllm:num_requests_waiting{engine="0",model_name="b"} 3.0' in busy
    assert busy.count("# TYPE vllm:num_requests_waiting gauge") == 1
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 1.0' in busy
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="b"} 1.0' in busy
    assert parse_gauges(busy) == (3.0, 2.0, 1.0)


def test_scheduler_hands_a_place_to_the_next_model_s_request():
    async def run() -> tuple[int, int, int, int]:
        scheduler = Scheduler(1)
        await scheduler.acquire(0, "a")
        waiting = asyncio.create_task(scheduler.acquire(0, "b"))
        await asyncio.sleep(0)
        before = scheduler.running_of("b"), scheduler.waiting_of("b")
        scheduler.release("a")
        await waiting
        return (*before, scheduler.running_of("a"), scheduler.running_of("b"))

    assert asyncio.run(run()) == (0, 1, 0, 1)
