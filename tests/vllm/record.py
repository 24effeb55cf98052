"""Record real vLLM answers for the simulator's shape test (tests/dev/test_simulator_shape.py).

    .venv/bin/python -m tests.vllm.record            # starts vLLM, writes tests/data/vllm-0.32/

Each case is one request, written as ``{"status": ..., "request": ..., "body": ...}``; the same
requests are sent to the simulator by the test, which compares key paths and value types.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.vllm.server import MODEL, VllmServer

OUT = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32"

SCHEMA = {
    "type": "object",
    "properties": {"word": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
    "required": ["word", "n"],
}


def cases(model: str) -> dict[str, dict[str, Any]]:
    """Name -> request body (``model`` is the served model)."""
    hello = [{"role": "user", "content": "Say hello in JSON."}]
    return {
        "success": {"model": model, "messages": hello, "max_tokens": 16, "seed": 1},
        "n2": {"model": model, "messages": hello, "max_tokens": 16, "n": 2, "seed": 2},
        "truncated": {"model": model, "messages": hello, "max_tokens": 3, "seed": 3},
        "json_schema": {
            "model": model,
            "messages": hello,
            "max_tokens": 64,
            "seed": 4,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "w", "schema": SCHEMA, "strict": True},
            },
        },
        "error_wrong_model": {"model": "gpt-4o", "messages": hello},
        "error_prompt_too_long": {
            "model": model,
            "messages": [{"role": "user", "content": "word " * 5000}],
        },
        "error_bad_request": {"model": model, "messages": "not a list"},
    }


def record(url: str, out: Path = OUT) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, request in cases(MODEL).items():
        response = httpx.post(f"{url}/v1/chat/completions", json=request, timeout=120)
        case = {"status": response.status_code, "request": request, "body": response.json()}
        (out / f"{name}.json").write_text(json.dumps(case, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    with VllmServer() as server:
        record(server.url)
