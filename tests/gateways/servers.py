"""The real gateways for the `gateway` test tier, each a process on 127.0.0.1 in front of
simulator processes: LiteLLM's proxy (:class:`LiteLLMProxy`) and vllm-router
(:class:`VllmRouter`), from the virtualenv ``tests/gateways/install.sh`` keeps under
~/.cache/dspark-json (:func:`installed` says why the tier cannot run where it is missing)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from dspark_json.dev.service import Service

#: The versions tests/gateways/install.sh pins (its virtualenv's name carries them).
LITELLM_VERSION = "1.108.0"
ROUTER_VERSION = "0.1.17"
VENV = Path(
    os.environ.get(
        "DSPARK_GATEWAYS_VENV",
        Path.home()
        / ".cache"
        / "dspark-json"
        / f"gateways-litellm-{LITELLM_VERSION}-router-{ROUTER_VERSION}",
    )
)
#: LiteLLM's master key in the tier's config (LiteLLM wants the ``sk-`` prefix).
MASTER_KEY = "sk-dspark-gateway-tier-7"
START_TIMEOUT_S = 120.0


def installed() -> str | None:
    """Why the tier cannot run here, or None."""
    if not (VENV / ".installed").exists():
        return (
            f"no gateways virtualenv at {VENV}: tests/gateways/install.sh did not complete "
            "(it installs litellm[proxy] and vllm-router from PyPI: no network?); run it, or "
            "`make test-gateways`"
        )
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def litellm_config(backends: Sequence[str], model: str, rpm: int | None = None) -> str:
    """LiteLLM's config (JSON is YAML): one model name, a deployment per backend (vLLM's
    OpenAI server, LiteLLM's ``hosted_vllm``), the master key; with ``rpm``, each deployment
    takes that many requests a minute (usage-based routing: beyond it, 429 with
    ``llm_provider-retry-after: 60``)."""
    deployments = []
    for url in backends:
        params: dict[str, object] = {
            "model": f"hosted_vllm/{model}",
            "api_base": f"{url}/v1",
            "api_key": "none",
        }
        if rpm is not None:
            params["rpm"] = rpm
        deployments.append({"model_name": model, "litellm_params": params})
    config: dict[str, object] = {
        "model_list": deployments,
        "general_settings": {"master_key": MASTER_KEY},
    }
    if rpm is not None:
        config["router_settings"] = {"routing_strategy": "usage-based-routing-v2"}
    return json.dumps(config, indent=1)


class _Gateway(Service):
    """A gateway process of its own session (so that its children stop with it), its output
    in a log file shown when it fails to start."""

    #: A path that answers 200 once the gateway serves.
    ready_path = "/"

    def __init__(self) -> None:
        self.url = ""
        self._work: str | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def command(self, port: int, work: str) -> list[str]:
        raise NotImplementedError

    def start(self) -> _Gateway:
        why = installed()
        if why is not None:
            raise RuntimeError(why)
        port = free_port()
        self._work = tempfile.mkdtemp(prefix="dspark-gateway-")
        env = {
            **os.environ,
            "LITELLM_LOG": "ERROR",
            # No fetch of the model cost map from GitHub at start (the tier runs offline).
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "NO_PROXY": "127.0.0.1,localhost",
        }
        with open(self.log, "wb") as log:
            self._process = subprocess.Popen(
                self.command(port, self._work),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self._work,
                start_new_session=True,
            )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"{type(self).__name__} exited at start: {self.tail()}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        tail = self.tail()
        self.stop()
        raise RuntimeError(f"{type(self).__name__} did not start in {START_TIMEOUT_S}s: {tail}")

    @property
    def log(self) -> str:
        return f"{self._work}/gateway.log"

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(Path(self.log).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait(timeout=10)
        self._process = None
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None


class LiteLLMProxy(_Gateway):
    """``litellm --config`` (:func:`litellm_config`) in front of ``backends``."""

    ready_path = "/health/liveliness"  # LiteLLM's liveness: no completion, no key

    def __init__(self, backends: Sequence[str], model: str, rpm: int | None = None) -> None:
        super().__init__()
        self.config = litellm_config(backends, model, rpm)

    def command(self, port: int, work: str) -> list[str]:
        path = Path(work) / "config.yaml"
        path.write_text(self.config, encoding="utf-8")
        return [
            str(VENV / "bin" / "litellm"),
            "--config",
            str(path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            "1",
        ]


class VllmRouter(_Gateway):
    """``vllm-router`` in front of ``backends``; its workers' health checked every second
    (the default is a minute), so that a test sees its ``/health`` turn 503 soon after a
    worker stops."""

    ready_path = "/v1/models"

    def __init__(self, backends: Sequence[str]) -> None:
        super().__init__()
        self.backends = list(backends)

    def command(self, port: int, work: str) -> list[str]:
        return [
            str(VENV / "bin" / "vllm-router"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--worker-urls",
            *self.backends,
            "--health-check-interval-secs",
            "1",
            "--log-dir",
            work,
            "--log-level",
            "warning",
        ]
