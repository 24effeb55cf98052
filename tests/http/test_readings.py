"""One /metrics reading per machine (http.readings): the tasks of a machine (processes) share
one fetch per endpoint a second, through a file and its flock."""

import asyncio
import multiprocessing
import time

import httpx

from dspark_json.dev.local import SimulatorProcess
from dspark_json.http import readings


def test_a_fresh_reading_of_another_task_is_used_and_a_stale_one_fetched_again(
    tmp_path, monkeypatch
):
    calls: list[int] = []

    async def fetch(limit: int) -> tuple[int, bytes]:
        calls.append(limit)
        return 200, b"vllm:num_requests_waiting 3"

    first = readings.shared("http://10.0.0.1:8000", fetch, tmp_path)
    second = readings.shared("http://10.0.0.1:8000", fetch, tmp_path)  # another task's
    assert asyncio.run(first(1000)) == (200, b"vllm:num_requests_waiting 3")
    assert asyncio.run(second(1000)) == (200, b"vllm:num_requests_waiting 3")
    assert len(calls) == 1
    monkeypatch.setattr(readings, "FRESH_S", 0.0)
    asyncio.run(second(1000))
    assert len(calls) == 2
    other = readings.shared("http://10.0.0.2:8000", fetch, tmp_path)  # another endpoint
    monkeypatch.setattr(readings, "FRESH_S", 0.9)
    asyncio.run(other(1000))
    assert len(calls) == 3


def _task(url: str, folder: str, seconds: float) -> None:
    """A task's gate reading the endpoint's /metrics ten times a second."""
    from pathlib import Path

    async def run() -> None:
        async with httpx.AsyncClient() as client:

            async def fetch(limit: int) -> tuple[int, bytes]:
                answer = await client.get(f"{url}/metrics")
                return answer.status_code, answer.content

            read = readings.shared(url, fetch, Path(folder))
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                status, _ = await read(1 << 20)
                assert status == 200
                await asyncio.sleep(0.1)

    asyncio.run(run())


def test_eight_tasks_of_a_machine_read_an_endpoint_about_once_a_second_in_all(tmp_path):
    with SimulatorProcess() as server:
        before = server.stats()["requests"]
        context = multiprocessing.get_context("fork")
        tasks = [
            context.Process(target=_task, args=(server.url, str(tmp_path), 3.0)) for _ in range(8)
        ]
        for task in tasks:
            task.start()
        for task in tasks:
            task.join(60)
        assert all(task.exitcode == 0 for task in tasks)
        reads = server.stats()["requests"] - before - 1  # the first /stats
    # 8 tasks x 10 a second x 3 s would be 240 reads; shared: about one per 0.9 s.
    assert 2 <= reads <= 12, reads


def test_a_link_or_fifo_planted_in_place_is_not_followed_nor_waited_on(tmp_path, monkeypatch):
    """The directory's path in the shared temp directory taken by a symbolic link (another
    user's, to a directory its owner can write): not used. A FIFO where a reading goes: read
    as no reading (a read of it would block the task's loop until someone writes)."""
    import importlib
    import os
    import threading

    importlib.reload(readings)  # the real directory(), not the fixture's (own_readings)
    monkeypatch.setattr(readings.tempfile, "tempdir", str(tmp_path))
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / f"dspark-json-metrics-{os.getuid()}").symlink_to(target)
    assert readings.directory() is None

    fifo = tmp_path / "reading"
    os.mkfifo(fifo)
    found: list[object] = []
    reader = threading.Thread(target=lambda: found.append(readings._fresh(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # blocked at open: let it go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert found == [None] and not reader.is_alive()


def test_leases_count_the_live_tasks_of_an_endpoint_and_nothing_else(tmp_path):
    """A task's lease counts while refreshed; a stale one, a link, a FIFO, another endpoint's
    do not (and are never followed or opened); a released one goes at once."""
    import os

    url = "http://10.0.0.1:8000"
    assert readings.tasks(url, "1-a", tmp_path) == readings.Share(1, 0)
    assert readings.tasks(url, "2-b", tmp_path) == readings.Share(2, 1)
    assert readings.tasks("http://10.0.0.2:8000", "3-c", tmp_path) == readings.Share(1, 0)
    prefix = readings._name(url) + ".task."
    stale = tmp_path / f"{prefix}4-d"
    stale.touch()
    os.utime(stale, (time.time() - readings.LEASE_S - 1,) * 2)
    target = tmp_path / "elsewhere"
    target.touch()
    (tmp_path / f"{prefix}5-e").symlink_to(target)  # a fresh file behind a link: not counted
    os.mkfifo(tmp_path / f"{prefix}6-f")
    assert readings.tasks(url, "1-a", tmp_path) == readings.Share(2, 0)
    forgotten = tmp_path / f"{prefix}7-g"
    forgotten.touch()
    os.utime(forgotten, (time.time() - 3600,) * 2)
    readings.tasks(url, "1-a", tmp_path)
    assert not forgotten.exists()  # a killed task's lease is removed
    readings.release(url, "2-b", tmp_path)
    assert readings.tasks(url, "1-a", tmp_path) == readings.Share(1, 0)
    # A link where this task's own lease would be is not written through.
    (tmp_path / f"{prefix}8-h").symlink_to(target)
    before = target.stat().st_mtime
    readings.tasks(url, "8-h", tmp_path)
    assert target.stat().st_mtime == before


def _gate_task(folder: str, barrier: object, targets: object) -> None:
    """One task's gate, registered on the machine, taking its part of one reading's room."""
    from pathlib import Path

    from dspark_json.http.gauges import Gate, Reading

    class OneReading:
        refresh_s = 1.0
        reading = Reading(0, 2, 2 / 16, time.monotonic())  # 2 running of 16: room 10

        async def read(
            self, url: str, fetch: object, route: str = "", first: bool = True
        ) -> Reading:
            return self.reading

    def tasks(url: str, name: str) -> readings.Share:
        return readings.tasks(url, name, Path(folder))

    gate = Gate(0, OneReading(), tasks=tasks)  # type: ignore[arg-type]
    tasks("u", gate.name)  # registered before any task reads
    barrier.wait()  # type: ignore[attr-defined]
    asyncio.run(gate.wait("u", lambda limit: None, 5.0))  # type: ignore[arg-type]
    targets.put(gate._budgets["u"].target)  # type: ignore[attr-defined]


def _gate_on_machine(folder: str, barrier: object, targets: object, width: object) -> None:
    """One task's gate on the "machine" of ``folder`` (its leases' directory), told the pool's
    width by the driver, taking its part of one reading's room (16 more requests)."""
    from pathlib import Path

    from dspark_json.http.gauges import Gate, Reading

    class OneReading:
        refresh_s = 1.0
        reading = Reading(0, 4, 0.16, time.monotonic())  # 4 running at KV 0.16: room 16

        async def read(
            self, url: str, fetch: object, route: str = "", first: bool = True
        ) -> Reading:
            return self.reading

    def tasks(url: str, name: str) -> readings.Share:
        return readings.tasks(url, name, Path(folder))

    gate = Gate(0, OneReading(), tasks=tasks, width=width)  # type: ignore[arg-type]
    tasks("u", gate.name)  # registered before any task reads
    barrier.wait()  # type: ignore[attr-defined]
    asyncio.run(gate.wait("u", lambda limit: None, 5.0))  # type: ignore[arg-type]
    targets.put(gate._budgets["u"].target)  # type: ignore[attr-defined]


def gate_targets(task: object, each: list[tuple[object, ...]]) -> list[float]:
    """Run one task process per ``each`` (its arguments, the barrier and the queue put in after
    the first), all at once; their gates' targets, sorted."""
    context = multiprocessing.get_context("fork")
    barrier, targets = context.Barrier(len(each)), context.Queue()
    tasks = [
        context.Process(target=task, args=(args[0], barrier, targets, *args[1:])) for args in each
    ]
    for process in tasks:
        process.start()
    for process in tasks:
        process.join(60)
    assert all(process.exitcode == 0 for process in tasks)
    return sorted(targets.get(timeout=5) for _ in each)


def test_the_tasks_of_two_machines_split_the_room_once_with_the_pools_width(tmp_path):
    """Two machines (two lease directories: neither sees the other's tasks), four tasks each,
    one reading with room for 16: told the width (2 machines, 8 tasks at once) they target 16
    in all, where each machine's tasks alone took the whole room (32)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    parts = gate_targets(_gate_on_machine, [(str(tmp_path / m), (2, 8)) for m in "aaaabbbb"])
    assert parts == [2.0] * 8, parts


def test_the_width_counts_this_machines_tasks_times_the_machines_at_most_those_at_once():
    from dspark_json.http.gauges import across

    share = readings.Share(3, 1)
    assert across(share, None) == share  # unknown: this machine's tasks alone
    assert across(share, (2, 8)) == readings.Share(6, 1)
    assert across(share, (4, 8)) == readings.Share(8, 1)  # at most the tasks at once
    assert across(readings.Share(9, 0), (2, 4)) == readings.Share(9, 0)  # never fewer than here


def test_readings_and_leases_are_apart_for_requests_routed_by_other_headers(tmp_path):
    """Two queries to one gateway with other routing headers (option requestHeaders) neither
    share a reading nor split each other's room; a credential's value is in neither name."""
    from dspark_json.http.headers import request_headers

    url = "http://gw:8000"
    calls: list[int] = []

    async def fetch(limit: int) -> tuple[int, bytes]:
        calls.append(limit)
        return 200, b"vllm:num_requests_waiting 0\n"

    one = request_headers("requestHeaders", '{"x-llm-d-inference-objective": "batch"}').route()
    two = request_headers("requestHeaders", '{"x-llm-d-inference-objective": "chat"}').route()
    assert one and two and one != two

    async def read_both() -> None:
        await readings.shared(url, fetch, tmp_path, route=one)(1000)
        await readings.shared(url, fetch, tmp_path, route=two)(1000)
        await readings.shared(url, fetch, tmp_path, route=one)(1000)  # the first's, kept

    asyncio.run(read_both())
    assert len(calls) == 2
    assert readings.tasks(url, "1-a", tmp_path, route=one) == readings.Share(1, 0)
    assert readings.tasks(url, "2-b", tmp_path, route=two) == readings.Share(1, 0)
    secret = request_headers("requestHeaders", '{"x-api-key": "sk-hidden-1", "x-r": "1"}')
    other = request_headers("requestHeaders", '{"x-api-key": "sk-hidden-2", "x-r": "1"}')
    assert secret.route() == other.route()  # credentials count by name only
    assert not any("sk-hidden" in p.name for p in tmp_path.iterdir())


def test_eight_tasks_of_a_machine_share_the_room_a_reading_shows(tmp_path):
    """Eight task processes see one reading with room for 10 more requests: together they
    target 10 in flight (each its part, the remainder to two of them), not 8 x 10."""
    parts = gate_targets(_gate_task, [(str(tmp_path),)] * 8)
    assert sum(parts) == 10, parts
    assert parts[0] >= 1 and parts[-1] <= 2, parts


def test_a_part_of_the_room_is_whole_requests_and_the_parts_add_up_to_it():
    import math

    from dspark_json.http.gauges import part

    for free in (-33, -4, -1, 0, 1, 5, 31, 32, 100):
        for count in (1, 3, 8, 32):
            for shift in (0, 7):
                parts = [part(free, readings.Share(count, r), shift) for r in range(count)]
                assert sum(parts) == free
                assert max(parts) - min(parts) <= 1
    assert part(-8, readings.Share(4, 1), 0) == -2  # each gives back its part of the excess
    assert part(math.inf, readings.Share(4, 1), 0) == math.inf  # idle: no bound
    # The remainder turns with the shift: a task with nothing at one reading gets some later.
    assert {part(3, readings.Share(8, 5), shift) for shift in range(8)} == {0.0, 1.0}
