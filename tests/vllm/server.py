"""Real vLLM for the `vllm` test tier and the benchmark: a server process on 127.0.0.1.

``tests/vllm/install.sh`` puts vLLM (CPU build) in a cached virtualenv and builds the tiny model;
:class:`VllmServer` starts ``vllm.entrypoints.openai.api_server`` on a free port, waits for
``/health``, and stops it (SIGTERM; its engine process follows).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.processes import ServerProcess

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


class VllmServer(ServerProcess):
    """``with VllmServer() as server: httpx.get(server.url + "/health")``; ``extra`` are more
    arguments of vLLM's server."""

    name = "vLLM"
    ready_path = "/health"
    stop_timeout = 30.0

    def __init__(self, *extra: str, start_timeout: float = 240.0) -> None:
        super().__init__()
        self.extra = extra
        self.start_timeout = start_timeout

    def unavailable(self) -> str | None:
        return installed()

    def environment(self, work: str) -> dict[str, str]:
        return {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
            "VLLM_CPU_OMP_THREADS_BIND": "auto",
            "VLLM_CACHE_ROOT": f"{work}/cache",
            "TMPDIR": work,  # vLLM leaves ipc sockets there
            "VLLM_LOGGING_LEVEL": "WARNING",
        }

    def command(self, port: int, work: str) -> list[str]:
        return [
            str(VENV.absolute() / "bin" / "python"),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(MODEL_DIR.absolute()),
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
