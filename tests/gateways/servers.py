"""The real gateways for the `gateway` test tier, each a process on 127.0.0.1 in front of
simulator processes: LiteLLM's proxy (:class:`LiteLLMProxy`) and vllm-router
(:class:`VllmRouter`), from the virtualenv ``tests/gateways/install.sh`` keeps under
~/.cache/dspark-json (:func:`installed` says why the tier cannot run where it is missing)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from tests.processes import ServerProcess


def _versions() -> dict[str, str]:
    """tests/gateways/versions.env, the versions install.sh installs: ``NAME=VERSION`` lines."""
    text = (Path(__file__).parent / "versions.env").read_text(encoding="utf-8")
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {name.strip(): value.strip() for name, value in pairs if not name.startswith("#")}


_VERSIONS = _versions()
#: The versions tests/gateways/install.sh installs (its virtualenv's name carries them).
LITELLM_VERSION = _VERSIONS["LITELLM"]
ROUTER_VERSION = _VERSIONS["ROUTER"]
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


class _Gateway(ServerProcess):
    """A gateway from the tier's virtualenv, offline."""

    start_timeout = START_TIMEOUT_S

    def unavailable(self) -> str | None:
        return installed()

    def environment(self, work: str) -> dict[str, str]:
        return {
            **os.environ,
            "LITELLM_LOG": "ERROR",
            # No fetch of the model cost map from GitHub at start (the tier runs offline).
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "NO_PROXY": "127.0.0.1,localhost",
        }


class LiteLLMProxy(_Gateway):
    """``litellm --config`` (:func:`litellm_config`) in front of ``backends``."""

    name = "LiteLLM's proxy"
    ready_path = "/health/liveliness"  # LiteLLM's liveness: no completion, no key

    def __init__(self, backends: Sequence[str], model: str, rpm: int | None = None) -> None:
        super().__init__()
        self.config = litellm_config(backends, model, rpm)

    def command(self, port: int, work: str) -> list[str]:
        path = Path(work) / "config.yaml"
        path.write_text(self.config, encoding="utf-8")
        return [
            str(VENV.absolute() / "bin" / "litellm"),
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

    name = "vllm-router"
    ready_path = "/v1/models"

    def __init__(self, backends: Sequence[str]) -> None:
        super().__init__()
        self.backends = list(backends)

    def command(self, port: int, work: str) -> list[str]:
        return [
            str(VENV.absolute() / "bin" / "vllm-router"),
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
