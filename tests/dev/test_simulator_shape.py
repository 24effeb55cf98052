"""The simulator answers in vLLM 0.32's exact shape: the same requests as recorded from real vLLM
(tests/data/vllm-0.32/, written by ``python -m tests.vllm.record``), compared key path by key
path, with each value's JSON type."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

RECORDED = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32"
CASES = sorted(p.stem for p in RECORDED.glob("*.json"))


def shape(value: Any, path: str = "$") -> dict[str, str]:
    """Every key path of a JSON value -> its JSON type (list elements share the path ``[]``)."""
    kind = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    if isinstance(value, bool | str | dict | list) or value is None:
        name = kind[type(value)]
    else:
        name = "number"
    out = {path: name}
    if isinstance(value, dict):
        for key, item in value.items():
            out.update(shape(item, f"{path}.{key}"))
    elif isinstance(value, list):
        for item in value:
            out.update(shape(item, f"{path}[]"))
    return out


def test_the_recorded_cases_are_there():
    assert {"success", "n2", "truncated", "json_schema", "error_wrong_model"} <= set(CASES)


@pytest.mark.parametrize("name", CASES)
def test_the_simulator_answers_like_vllm(simulator, name):
    case = json.loads((RECORDED / f"{name}.json").read_text())
    request = dict(case["request"])
    if request.get("model") == "tiny-random":
        request["model"] = simulator.model
    response = httpx.post(f"{simulator.url}/v1/chat/completions", json=request, timeout=30)
    assert response.status_code == case["status"]
    real, ours = case["body"], response.json()
    assert list(ours) == list(real)  # the same keys, in vLLM's order
    assert shape(ours) == shape(real)
    if "error" in real:
        for key in ("type", "param", "code"):
            assert ours["error"][key] == real["error"][key], key
        return
    assert [list(c) for c in ours["choices"]] == [list(c) for c in real["choices"]]
    assert [list(c["message"]) for c in ours["choices"]] == [
        list(c["message"]) for c in real["choices"]
    ]
    assert [c["finish_reason"] for c in ours["choices"]] == [
        c["finish_reason"] for c in real["choices"]
    ]
    assert ours["system_fingerprint"].startswith("vllm-0.32.0-")
