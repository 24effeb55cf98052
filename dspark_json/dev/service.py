"""What the local processes the demo, tests and benchmarks start have in common: ``start()``,
``stop()``, and ``with Service() as s:`` around them; a free port on 127.0.0.1 to give one
(:func:`free_port`) and the wait until it listens there (:func:`wait_for_port`)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from types import TracebackType
from typing import Any, Self

__all__ = ["Service", "free_port", "wait_for_port"]


class Service:
    """A process to start and stop; a context manager that does both."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def free_port() -> int:
    """A TCP port on 127.0.0.1 free now (the OS's pick), for a process to listen on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for_port(
    port: int,
    timeout: float,
    process: subprocess.Popen[Any] | None = None,
    what: str = "the process",
) -> None:
    """Return once something accepts connections on 127.0.0.1:``port``; RuntimeError naming
    ``what`` if ``process`` exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited at start (code {process.returncode})")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} in {timeout} s")
