"""Option ``readTimeout`` is a silence timeout, as documented: a server that keeps sending,
however slowly, is not cut by it (``requestTimeout`` bounds the whole attempt), and one that
stops sending is. Real servers on 127.0.0.1 that trickle or fall silent."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from tests.raw_servers import completion, socket_server

BODY = json.dumps(completion('{"score": 1}')).encode()


@contextmanager
def slow_server(pieces: int, every: float, silent_after: int | None = None) -> Iterator[str]:
    """Answers each POST with its head, then the body in ``pieces`` pieces, one each ``every``
    seconds; after ``silent_after`` pieces it sends nothing more (and holds the connection)."""

    def answer(connection: socket.socket, stop: threading.Event) -> None:
        with connection:
            data = b""
            while b"\r\n\r\n" not in data:
                data += connection.recv(65536)
            if data.startswith(b"GET"):
                connection.sendall(b"HTTP/1.1 200 X\r\ncontent-length: 2\r\n\r\n{}")
                return
            connection.sendall(b"HTTP/1.1 200 X\r\ncontent-length: %d\r\n\r\n" % len(BODY))
            size = -(-len(BODY) // pieces)
            for i in range(pieces):
                if silent_after is not None and i >= silent_after:
                    stop.wait(30)
                    return
                time.sleep(every)
                connection.sendall(BODY[i * size : (i + 1) * size])

    with socket_server(answer) as url:
        yield url


def fetch(url: str) -> tuple[object, float]:
    config = HttpOptions(
        endpoints=(Endpoint(url),), read_timeout=1.0, request_timeout=30.0, max_attempts=1
    )
    started = time.monotonic()
    fetched = complete_all([{"prompt": "p"}], config)
    return fetched.outcomes[0], time.monotonic() - started


def test_a_server_that_keeps_sending_slowly_is_not_cut_by_read_timeout():
    with slow_server(pieces=10, every=0.4) as url:  # 4 s in all, never 1 s silent
        outcome, took = fetch(url)
    assert outcome.error is None, outcome.error
    assert outcome.body == BODY.decode()
    assert took >= 3.5


def test_a_server_that_falls_silent_is_cut_by_read_timeout():
    with slow_server(pieces=10, every=0.2, silent_after=3) as url:
        outcome, took = fetch(url)
    assert outcome.body is None
    assert outcome.error is not None and outcome.error["type"] == "timeout"
    assert took < 5, took
