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
