"""Connections per task whatever the number of endpoints (issue 53: 2,000 replicas in one task
opened 2,010 connections at once; past a 1,024 file limit replicas silently got nothing): the
/v1/models lookups of a refresh go MAX_LOOKUPS_AT_ONCE at a time, and a transport keeps
MAX_IDLE_CONNECTIONS idle connections at most."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

import httpx

from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.replicas import MAX_LOOKUPS_AT_ONCE, Replicas
from dspark_json.http.transport import MAX_IDLE_CONNECTIONS, StreamTransport
from tests.raw_servers import alive, raw_server, response


def test_a_refresh_looks_up_a_bounded_number_of_replicas_at_once(tmp_path):
    path = tmp_path / "replicas.txt"
    path.write_text("".join(f"http://10.0.{i // 200}.{i % 200}:8000\n" for i in range(200)))
    config = HttpOptions(endpoints=(Endpoint("http://10.1.0.1:8000"),), endpoints_file=str(path))
    now, most = [0], [0]

    async def get(endpoint: Endpoint, path: str) -> tuple[int, bytes]:
        now[0] += 1
        most[0] = max(most[0], now[0])
        await asyncio.sleep(0.01)
        now[0] -= 1
        return 200, b'{"data": [{"id": "m"}]}'

    async def scenario() -> int:
        replicas = Replicas(config, get, lambda endpoints: None)
        await replicas.refresh()
        return len(replicas.endpoints)

    assert asyncio.run(scenario()) == 201
    assert most[0] == MAX_LOOKUPS_AT_ONCE


def test_a_transport_keeps_a_bounded_number_of_idle_connections():
    count = MAX_IDLE_CONNECTIONS + 4

    async def scenario(urls: list[str]) -> tuple[int, int]:
        transport = StreamTransport()
        try:
            for url in urls:
                answer = await transport.handle_async_request(httpx.Request("GET", url))
                await answer.aread()
            # Two requests to one origin at once: one connection stays idle, not two.
            await asyncio.gather(
                *(transport.handle_async_request(httpx.Request("GET", urls[-1])) for _ in "ab")
            )
            open_ = sum(not w.is_closing() for _, w in transport._idle.values())
            return len(transport._idle), open_
        finally:
            await transport.aclose()

    def keep_alive(request):
        answer = alive(request) or response(200, {})
        return answer.replace(b"connection: close", b"connection: keep-alive")

    with ExitStack() as stack:
        servers = [stack.enter_context(raw_server(keep_alive)) for _ in range(count)]
        idle, open_ = asyncio.run(scenario([f"{s.url}/v1/models" for s in servers]))
    assert idle == open_ == MAX_IDLE_CONNECTIONS


def test_a_look_at_replicas_that_do_not_answer_is_bounded_in_time(tmp_path, monkeypatch):
    """Thousands of replicas that do not answer /v1/models, a few at a time, would hold the
    task's start for hours: the look ends at REFRESH_BOUND_S, those not answered take nothing."""
    from dspark_json.http import replicas as module

    monkeypatch.setattr(module, "REFRESH_BOUND_S", 0.5)
    path = tmp_path / "replicas.txt"
    path.write_text("".join(f"http://10.0.0.{i}:8000\n" for i in range(1, 101)))
    config = HttpOptions(endpoints=(Endpoint("http://10.1.0.1:8000"),), endpoints_file=str(path))

    async def get(endpoint: Endpoint, path: str) -> tuple[int, bytes]:
        if endpoint.url.endswith(".1:8000"):
            return 200, b'{"data": [{"id": "m"}]}'
        await asyncio.sleep(3600)  # a replica that never answers
        raise AssertionError

    async def scenario() -> tuple[bool, bool, bool]:
        replicas = Replicas(config, get, lambda endpoints: None)
        replicas.active = True
        await replicas.refresh()
        allows = replicas.allows("m")
        assert allows is not None
        return (
            allows(Endpoint("http://10.0.0.1:8000")),
            allows(Endpoint("http://10.0.0.2:8000")),  # never answered: takes nothing
            allows(Endpoint("http://10.1.0.1:8000")),  # option endpoint: as before, any model
        )

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == (True, False, True)
