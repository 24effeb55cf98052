"""Misbehaving model servers on 127.0.0.1, at the byte level: each sees the raw request (so a
test can tell an injected header from a value) and answers whatever bytes its handler returns."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Request:
    """One request as it arrived."""

    raw: bytes  # the head and the body, as sent
    method: str
    path: str
    header_lines: list[bytes]  # each line of the head after the request line

    def header(self, name: str) -> str | None:
        for line in self.header_lines:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.lower().encode():
                return value.strip().decode("latin-1")
        return None


#: A handler returns the raw response bytes; None closes the connection without an answer.
Handler = Callable[[Request], bytes | None]


def response(status: int, body: bytes | str | dict | list, *, reason: str = "X") -> bytes:
    """A complete HTTP/1.1 response that closes the connection."""
    if isinstance(body, dict | list):
        body = json.dumps(body)
    data = body.encode() if isinstance(body, str) else body
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + data


def completion(content: str) -> dict:
    """A chat completion body whose first choice holds ``content``."""
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def alive(request: Request) -> bytes | None:
    """/health and /v1/models as a server that is up and serves model 'm'."""
    if request.path == "/health":
        return response(200, {})
    if request.path == "/v1/models":
        return response(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
    return None


def gauges_server(metrics: str, content: str = "{}") -> Handler:
    """A server up with model 'm' (:func:`alive`) whose ``/metrics`` says ``metrics`` and
    whose completions hold ``content``."""

    def handle(request: Request) -> bytes | None:
        if request.path == "/metrics":
            return response(200, metrics)
        return alive(request) or response(200, completion(content))

    return handle


class RawServer:
    """Records every request (``requests``) and answers with ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._stop = threading.Event()

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(30)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                length = 0
                for line in lines[1:]:
                    key, _, value = line.partition(b":")
                    if key.strip().lower() == b"content-length":
                        length = int(value)
                while len(body) < length:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                method, path = lines[0].decode("latin-1").split(" ")[:2]
                request = Request(head + b"\r\n\r\n" + body, method, path, lines[1:])
                self.requests.append(request)
                answer = self.handler(request)
                if answer is not None:
                    connection.sendall(answer)
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
        self._socket.close()


@contextmanager
def raw_server(handler: Handler) -> Iterator[RawServer]:
    server = RawServer(handler)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(timeout=5)


@contextmanager
def socket_server(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A server on 127.0.0.1 that hands each connection, with the event set at shutdown, to
    ``answer`` on a thread of its own (for answers written over time: trickles, silences);
    yields its base URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=answer, args=(connection, stop), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=5)
