"""A server the test tiers start as a process of their own (vLLM, the gateways): on a free port
of 127.0.0.1, in a session of its own (so that its children stop with it), its output in a log
file whose tail its errors show, ready once a path answers 200."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

import httpx

from dspark_json.dev.service import Service, free_port


class ServerProcess(Service):
    """Subclasses say how to run it (:meth:`command`, :meth:`environment`) and why it cannot
    run here (:meth:`unavailable`); ``url`` is where it answers once started."""

    #: Its name in errors.
    name = "the server"
    #: A path that answers 200 once it serves.
    ready_path = "/"
    #: Seconds for that 200, and for SIGTERM to end it before SIGKILL.
    start_timeout = 120.0
    stop_timeout = 20.0

    def __init__(self) -> None:
        self.url = ""
        self.log = ""
        self._work: str | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def command(self, port: int, work: str) -> list[str]:
        """The command line that serves on ``port``; ``work`` is its own temporary directory."""
        raise NotImplementedError

    def environment(self, work: str) -> dict[str, str]:
        return dict(os.environ)

    def unavailable(self) -> str | None:
        """Why it cannot run here (not installed), or None."""
        return None

    def start(self) -> Self:
        why = self.unavailable()
        if why is not None:
            raise RuntimeError(why)
        port = free_port()
        self._work = tempfile.mkdtemp(prefix="dspark-server-")
        self.log = f"{self._work}/server.log"
        with open(self.log, "wb") as log:
            self._process = subprocess.Popen(
                self.command(port, self._work),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(self._work),
                cwd=self._work,
                start_new_session=True,
            )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                tail = self.tail()
                self.stop()
                raise RuntimeError(f"{self.name} exited at start: {tail}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        tail = self.tail()
        self.stop()
        raise RuntimeError(
            f"{self.name} did not answer {self.ready_path} in {self.start_timeout} s: {tail}"
        )

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` of its output."""
        try:
            return "\n".join(Path(self.log).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait(timeout=10)
        self._process = None
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None
