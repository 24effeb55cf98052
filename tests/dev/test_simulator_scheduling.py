"""The simulator as a shared vLLM replica: its /metrics gauges, its queue's order under
``--scheduling-policy priority``, and the 400 vLLM gives a priority under fcfs."""

import asyncio
import time

import httpx
import pytest

from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults, Scheduler
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


def test_metrics_show_running_waiting_and_kv_use_with_vllm_names():
    """Six requests of 0.6 s on a capacity of 2: 2 run, 4 wait, KV use 1.0; then all zero."""

    async def load(url: str) -> tuple[str, str]:
        async with httpx.AsyncClient(timeout=30) as client:
            sent = [
                asyncio.create_task(client.post(f"{url}/v1/chat/completions", json=BODY))
                for _ in range(6)
            ]
            await asyncio.sleep(0.3)
            busy = (await client.get(f"{url}/metrics")).text
            await asyncio.gather(*sent)
            return busy, (await client.get(f"{url}/metrics")).text

    with SimulatorProcess(latency=0.6, faults=Faults(capacity=2)) as server:
        busy, idle = asyncio.run(load(server.url))
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        assert f"# TYPE vllm:{name} gauge" in busy
        assert f"# HELP vllm:{name} " in busy
    assert 'vllm:num_requests_waiting{engine="0",model_name="dspark-sim"} 4.0' in busy
    assert 'vllm:num_requests_running{engine="0",model_name="dspark-sim"} 2.0' in busy
    assert parse_gauges(busy) == (4.0, 2.0, 1.0)
    assert parse_gauges(idle) == (0.0, 0.0, 0.0)


def test_priority_policy_admits_waiting_requests_by_priority_then_arrival():
    """One request holds the only place; then 5, 1, 5, 0 arrive in that order: they run
    0, 1, then the two 5s in arrival order (the server's own clock says when each ended)."""

    async def order(url: str) -> list[str]:
        async with httpx.AsyncClient(timeout=30) as client:

            async def send(name: str, priority: int) -> tuple[float, str]:
                body = {**BODY, "priority": priority}
                headers = {"x-dspark-tenant": name}
                await client.post(f"{url}/v1/chat/completions", json=body, headers=headers)
                return time.perf_counter(), name

            first = asyncio.create_task(send("first", 9))
            await asyncio.sleep(0.1)
            later = []
            for name, priority in (("a5", 5), ("b1", 1), ("c5", 5), ("d0", 0)):
                later.append(asyncio.create_task(send(name, priority)))
                await asyncio.sleep(0.05)
            done = await asyncio.gather(first, *later)
            stats = (await client.get(f"{url}/stats/latency")).json()
            assert set(stats) == {"first", "a5", "b1", "c5", "d0"}
            return [name for _, name in sorted(done)]

    faults = Faults(capacity=1, scheduling_policy="priority")
    with SimulatorProcess(latency=0.3, faults=faults) as server:
        assert asyncio.run(order(server.url)) == ["first", "d0", "b1", "a5", "c5"]


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

    async def load(url: str) -> str:
        async with httpx.AsyncClient(timeout=30) as client:
            sent = []
            for i, model in enumerate("aabbb"):
                body = {"model": model, "messages": [{"role": "user", "content": f"x{i}"}]}
                sent.append(
                    asyncio.create_task(client.post(f"{url}/v1/chat/completions", json=body))
                )
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)
            busy = (await client.get(f"{url}/metrics")).text
            await asyncio.gather(*sent)
            return busy

    with SimulatorProcess(model="a,b", latency=0.8, faults=Faults(capacity=2)) as server:
        busy = asyncio.run(load(server.url))
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
        await asyncio.sleep(0.01)
        before = scheduler.running_of("b"), scheduler.waiting_of("b")
        scheduler.release("a")
        await waiting
        return (*before, scheduler.running_of("a"), scheduler.running_of("b"))

    assert asyncio.run(run()) == (0, 1, 0, 1)
