"""The checks at .load() (/health, /v1/models, schemaEndpoint) are bounded as completions are:
maxResponseBytes on their bodies (as received and once decompressed), the transport's header
bounds, and one time bound on each request. Real misbehaving servers on 127.0.0.1."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dspark_json.errors import ServerError
from dspark_json.http import preflight
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.preflight import check_model, fetch_served_schema
from tests.raw_servers import Request, alive, raw_server, response, socket_server

LIMIT = 1 << 20


def options(url: str, health: str = "auto") -> HttpOptions:
    return HttpOptions(endpoints=(Endpoint(url),), max_response_bytes=LIMIT, health_path=health)


def models_answer(answer: bytes):
    def handler(request: Request) -> bytes | None:
        return answer if request.path == "/v1/models" else alive(request)

    return handler


def test_a_gzip_bomb_on_v1_models_stops_at_max_response_bytes():
    packed = gzip.compress(b'{"data": ["' + b"0" * (40 * LIMIT) + b'"]}', 9)  # 40 MiB inflated
    head = (
        "HTTP/1.1 200 X\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
        f"content-length: {len(packed)}\r\nconnection: close\r\n\r\n"
    )
    with (
        raw_server(models_answer(head.encode() + packed)) as server,
        pytest.raises(ServerError) as caught,
    ):
        check_model(options(server.url), None)
    text = str(caught.value)
    assert f"{server.url}/v1/models" in text
    assert f"larger than maxResponseBytes={LIMIT} bytes once decompressed" in text
    assert "'endpoint'" in text and "'maxResponseBytes'" in text


def test_a_header_flood_on_health_is_refused():
    flood = b"HTTP/1.1 200 X\r\n" + b"x-h: v\r\n" * 200_000 + b"content-length: 2\r\n\r\n{}"
    started = time.monotonic()
    with (
        raw_server(lambda request: flood) as server,
        pytest.raises(ServerError, match="more than 256 header lines") as caught,
    ):
        check_model(options(server.url, "/health"), None)
    assert time.monotonic() - started < 10
    assert f"{server.url}/health" in str(caught.value)


def test_a_schema_endpoint_over_the_limit_names_its_option():
    big = response(200, {"type": "object", "description": "x" * (2 * LIMIT)})
    with raw_server(lambda request: big) as server, pytest.raises(ServerError) as caught:
        fetch_served_schema(options(server.url), "/schema")
    text = str(caught.value)
    assert f"larger than maxResponseBytes={LIMIT} bytes as received" in text
    assert "'schemaEndpoint'" in text


@contextmanager
def trickling(seconds: float, every: float) -> Iterator[str]:
    """A server whose every answer is a head, then one body byte each ``every`` seconds for
    ``seconds`` (never silent for long, never done in time)."""

    def answer(connection: socket.socket, stop: threading.Event) -> None:
        with connection:
            connection.recv(65536)
            n = int(seconds / every)
            connection.sendall(b"HTTP/1.1 200 X\r\ncontent-length: %d\r\n\r\n" % n)
            for _ in range(n):
                if stop.is_set():
                    return
                time.sleep(every)
                try:
                    connection.sendall(b" ")
                except OSError:
                    return

    with socket_server(answer) as url:
        yield url


def test_a_health_that_trickles_is_cut_at_the_check_bound(monkeypatch):
    monkeypatch.setattr(preflight, "CHECK_TIMEOUT_S", 1.5, raising=False)
    with trickling(seconds=12, every=0.25) as url:
        started = time.monotonic()
        with pytest.raises(ServerError) as caught:
            check_model(options(url, "/health"), "m")
        took = time.monotonic() - started
    assert took < 4, took
    text = str(caught.value)
    assert f"{url}/health did not answer within 1.5 s (connect and read together" in text


def test_credentials_in_a_schema_endpoint_url_are_masked():
    canary = "pa55-canary-schema"
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    url = f"http://ann:{canary}@127.0.0.1:{port}/schema"
    with pytest.raises(ServerError, match="schemaEndpoint") as caught:
        fetch_served_schema(options("http://127.0.0.1:9"), url)
    assert canary not in str(caught.value)
    assert "ann:" not in str(caught.value)
