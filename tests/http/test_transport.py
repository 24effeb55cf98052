"""The lean HTTP/1.1 transport against real sockets: the simulator and raw asyncio servers."""

import asyncio
import os
import time

import httpx
import pytest

from dspark_json.http import transport as transport_module
from dspark_json.http.transport import StreamTransport, proxy_for
from tests.raw_servers import socket_server


async def serve(answers):
    """A server on 127.0.0.1 that reads one request per answer and writes the answer's bytes
    (None: close the connection). Returns the server, its URL and the requests it read."""
    seen = []

    async def handle(reader, writer):
        for answer in answers:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(v)
                    for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                    if k.lower() == b"content-length"
                ),
                0,
            )
            seen.append(head + await reader.readexactly(length))
            if answer is None:
                break
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", seen


def send(transport, url, content=b"", method="POST", timeout=5.0):
    request = httpx.Request(
        method,
        url,
        content=content,
        extensions={"timeout": dict.fromkeys(("connect", "read", "write", "pool"), timeout)},
    )
    return transport.handle_async_request(request)


def test_keep_alive_content_length_and_chunked_bodies():
    async def scenario():
        answers = [
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-a: 1\r\n\r\n"
            b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\ntrailer: x\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        ]
        server, url, seen = await serve(answers)
        transport = StreamTransport()
        first = await send(transport, f"{url}/a?q=1", b'{"x": 1}')
        second = await send(transport, f"{url}/b")
        third = await send(transport, f"{url}/c")
        await transport.aclose()
        server.close()
        return first, second, third, seen

    first, second, third, seen = asyncio.run(scenario())
    assert (first.status_code, first.content) == (200, b"hello")
    assert (second.content, second.headers["x-a"]) == (b"abcdefg", "1")
    assert third.status_code == 204 and third.content == b""
    assert len(seen) == 3  # one connection, kept alive for all three
    assert seen[0].startswith(b"POST /a?q=1 HTTP/1.1\r\n") and seen[0].endswith(b'{"x": 1}')
    assert b"content-length: 8" in seen[0].lower() and b"host: 127.0.0.1" in seen[0].lower()


def test_a_body_delimited_by_close_and_connection_close():
    async def scenario():
        server, url, _ = await serve([b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it"])
        transport = StreamTransport()
        response = await send(transport, url)
        idle = dict(transport._idle)
        server.close()
        return response, idle

    response, idle = asyncio.run(scenario())
    assert response.content == b"all of it" and idle == {}


@pytest.mark.parametrize(
    "answer",
    [None, b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\ncut short"],
    ids=["reset", "truncated"],
)
def test_a_connection_lost_mid_answer_is_a_protocol_error(answer):
    async def scenario():
        server, url, _ = await serve([answer])
        try:
            await send(StreamTransport(), url)
        finally:
            server.close()

    with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
        asyncio.run(scenario())


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_kept_connection_closed_as_it_is_taken(method):
    """The server closes a kept-alive connection just as the next request goes out on it (its
    close not seen yet; the CI failure of stop 51): a GET goes once more on a new connection, a
    POST is not sent twice (the client's retries decide)."""

    async def scenario():
        # Each connection answers one request, then reads the next and closes unanswered.
        server, url, seen = await serve([b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", None])
        transport = StreamTransport()
        try:
            first = await send(transport, url, method=method)
            try:
                second = await send(transport, url, method=method)
            except httpx.RemoteProtocolError as exc:
                second = exc
            return first, second, len(seen)
        finally:
            await transport.aclose()
            server.close()

    first, second, requests = asyncio.run(scenario())
    assert first.content == b"ok"
    if method == "GET":
        assert second.content == b"ok" and requests == 3
    else:
        assert isinstance(second, httpx.RemoteProtocolError) and requests == 2


def test_timeouts_and_refused_connections_are_httpx_errors():
    async def silent():
        async def handle(reader, writer):
            await asyncio.sleep(5)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            await send(StreamTransport(), url, timeout=0.1)
        finally:
            server.close()

    with pytest.raises(httpx.ReadTimeout):
        asyncio.run(silent())
    with pytest.raises(httpx.ConnectError):
        asyncio.run(send(StreamTransport(), "http://127.0.0.1:9/"))


def test_against_the_simulator(simulator):
    async def scenario():
        transport = StreamTransport()
        health = await send(transport, f"{simulator.url}/health", method="GET")
        models = await send(transport, f"{simulator.url}/v1/models", method="GET")
        await transport.aclose()
        return health, models

    health, models = asyncio.run(scenario())
    assert health.status_code == 200 and models.json()["data"][0]["id"] == "dspark-sim"


def test_the_proxy_follows_the_environment_as_it_changes(monkeypatch):
    """proxy_for keeps its answers (every worker of every task asks), by the environment's
    proxy variables: a variable set, changed or removed after an answer is seen at once."""
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert proxy_for("http://model.test:8000") is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.test:3128")
    assert proxy_for("http://model.test:8000") == "http://proxy.test:3128"
    assert proxy_for("https://model.test") is None  # no HTTPS_PROXY
    monkeypatch.setenv("http_proxy", "http://other.test:3128")  # lower case wins
    assert proxy_for("http://model.test:8000") == "http://other.test:3128"
    monkeypatch.setenv("no_proxy", "model.test")
    assert proxy_for("http://model.test:8000") is None
    assert proxy_for("http://elsewhere.test") == "http://other.test:3128"
    monkeypatch.delenv("no_proxy")
    monkeypatch.delenv("http_proxy")
    monkeypatch.delenv("HTTP_PROXY")
    assert proxy_for("http://model.test:8000") is None


def _keep_alive_server(connections, idle_s=30.0):
    """socket_server's answer: HTTP/1.1 keep-alive, ``{}`` to every request, each connection
    counted in ``connections``, closed by the server after ``idle_s`` seconds of silence."""

    def answer(connection, stop):
        connections.append(connection)
        connection.settimeout(idle_s)
        data = b""
        with connection:
            while not stop.is_set():
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = connection.recv(65536)
                        if not chunk:
                            return
                        data += chunk
                except OSError:  # silent for idle_s: the server closes it
                    return
                head, _, data = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(v)
                        for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                        if k.strip().lower() == b"content-length"
                    ),
                    0,
                )
                while len(data) < length:
                    data += connection.recv(65536)
                data = data[length:]
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: 2\r\n\r\n{}"
                )

    return answer


def _one_partition(url, requests=3):
    """What a task's partition does: a transport in a loop of its own, requests, closed."""

    async def scenario():
        transport = StreamTransport()
        try:
            for _ in range(requests):
                answer = await transport.handle_async_request(
                    httpx.Request("POST", f"{url}/v1/chat/completions", content=b"{}")
                )
                assert answer.status_code == 200
        finally:
            await transport.aclose()

    asyncio.run(scenario())


def test_the_next_partition_takes_the_connection_the_last_one_left():
    """Each partition runs in an event loop of its own; its idle connection is parked when its
    transport closes, and the next partition of the process sends on it: one connection for
    three partitions."""
    connections = []
    with socket_server(_keep_alive_server(connections)) as url:
        for _ in range(3):
            _one_partition(url)
    assert len(connections) == 1


def test_a_parked_connection_the_server_closed_is_not_used():
    """The server closes an idle connection (its keep-alive timeout) while it is parked: the
    next partition connects again, and its POST is answered (not failed on the closed one)."""
    connections = []
    with socket_server(_keep_alive_server(connections, idle_s=0.2)) as url:
        _one_partition(url)
        time.sleep(0.6)  # the server has closed it
        _one_partition(url)
    assert len(connections) == 2


def test_parked_connections_are_neither_old_nor_another_process_s(monkeypatch):
    """A connection parked longer than PARKED_SECONDS, or by another process (a forked child
    holds copies of its parent's sockets), is closed, not used."""
    connections = []
    with socket_server(_keep_alive_server(connections)) as url:
        _one_partition(url)
        monkeypatch.setattr(transport_module, "PARKED_SECONDS", 0.0)
        _one_partition(url)
        monkeypatch.undo()
        real = os.getpid()
        monkeypatch.setattr(transport_module.os, "getpid", lambda: real + 1)
        _one_partition(url)
    assert len(connections) == 3
