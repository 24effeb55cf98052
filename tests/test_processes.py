"""The helpers the test tiers start their servers with (tests/processes.py) and the free port
and wait of dspark_json.dev.service, on a real process: ``python -m http.server``."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from dspark_json.dev.service import free_port, wait_for_port
from tests.processes import ServerProcess


class _HttpServer(ServerProcess):
    name = "http.server"
    start_timeout = 30.0

    def __init__(self, *args: str) -> None:
        super().__init__()
        self.args = args

    def command(self, port: int, work: str) -> list[str]:
        return [sys.executable, *self.args, "-m", "http.server", str(port), "--bind", "127.0.0.1"]


def test_a_server_process_answers_once_started_and_is_gone_with_its_directory_once_stopped():
    server = _HttpServer()
    with server:
        assert httpx.get(server.url + "/", timeout=5).status_code == 200
        process = server._process
        work = server._work
        assert process is not None and work is not None
    assert process.poll() is not None
    assert server._work is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/", timeout=5)


def test_a_server_process_that_exits_at_start_says_so_with_the_tail_of_its_output():
    server = _HttpServer("-c", "import sys; sys.exit('no model here')")
    with pytest.raises(RuntimeError, match=r"http\.server exited at start: no model here"):
        server.start()
    assert server._process is None and server._work is None


def test_wait_for_port_returns_once_something_listens_and_names_a_process_that_died():
    port = free_port()
    listening = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, 30, listening, "http.server")
    finally:
        listening.terminate()
        listening.wait(10)
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match=r"The stub exited at start \(code 3\)"):
        wait_for_port(free_port(), 30, dead, "The stub")
    with pytest.raises(RuntimeError, match=r"did not listen on 127.0.0.1:\d+ in 0.3 s"):
        wait_for_port(free_port(), 0.3)
