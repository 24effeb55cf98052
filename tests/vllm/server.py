"""Real vLLM for the `vllm` test tier and the benchmark: a server process on 127.0.0.1.

``tests/vllm/install.sh`` puts vLLM (CPU build) in a cached virtualenv and builds the tiny model;
:class:`VllmServer` starts ``vllm.entrypoints.openai.api_server`` on a free port, waits for
``/health``, and stops it (SIGTERM; its engine process follows).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from dspark_json.dev.service import Service

CACHE = Path(os.environ.get("DSPARK_VLLM_CACHE", Path.home() / ".cache" / "dspark-json"))
VENV = Path(os.environ.get("DSPARK_VLLM_VENV", CACHE / "vllm-0.32.0"))
MODEL_DIR = Path(os.environ.get("DSPARK_VLLM_MODEL", CACHE / "tiny-model"))
MODEL = "tiny-random"
MAX_MODEL_LEN = 2048
#: Server-wide: xgrammar's default lets a random model write whitespace until max_tokens.
STRUCTURED = '{"backend": "xgrammar", "disable_any_whitespace": true}'


def installed() -> str | None:
    """Why the tier cannot run here, or None."""
    if not (VENV / "bin" / "python").exists():
        return f"no vLLM virtualenv at {VENV}: run `make test-vllm` (or tests/vllm/install.sh)"
    if not (MODEL_DIR / "model.safetensors").exists():
        return f"no model at {MODEL_DIR}: run tests/vllm/install.sh"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmServer(Service):
    """``with VllmServer() as server: httpx.get(server.url + "/health")``."""

    def __init__(self, *extra: str, start_timeout: float = 240.0) -> None:
        self.extra = extra
        self.start_timeout = start_timeout
        self.url = ""
        self.log = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._work: str | None = None

    def start(self) -> VllmServer:
        why = installed()
        if why is not None:
            raise RuntimeError(why)
        port = _free_port()
        self._work = tempfile.mkdtemp(prefix="dspark-vllm-")
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
            "VLLM_CPU_OMP_THREADS_BIND": "auto",
            "VLLM_CACHE_ROOT": f"{self._work}/cache",
            "TMPDIR": self._work,  # vLLM leaves ipc sockets there
            "VLLM_LOGGING_LEVEL": "WARNING",
        }
        self.log = f"{self._work}/server.log"
        command = [
            str(VENV / "bin" / "python"),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(MODEL_DIR),
            "--served-model-name",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--dtype",
            "float32",
            "--enforce-eager",
            "--structured-outputs-config",
            STRUCTURED,
            # vLLM's automatic prefix caching, and its hits in usage.prompt_tokens_details.
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            # A tool_choice naming a function is refused (400: "requires --tool-call-parser to
            # be set") unless both are given (vLLM 0.32 makes no tool parser without
            # --enable-auto-tool-choice); the call itself is guided decoding of its parameters.
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            *self.extra,
        ]
        with open(self.log, "wb") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"vLLM exited at start: {self.tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"vLLM did not answer /health within {self.start_timeout}s")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(Path(self.log).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait(timeout=10)
        self._process = None
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None
