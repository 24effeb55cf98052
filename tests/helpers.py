"""What several test modules share: the canary key, the review schema, a prompt writer, a chat
completion body, a comparison of two parsers' tables."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

#: An API key no Spark redaction pattern matches by itself (Spark also redacts values that
#: contain "secret", "token", "password", so such a canary would pass by accident).
CANARY = "zq-canary-7f3a9c"
#: For option apiKeyEnv: set before the Spark session starts, so its Python workers inherit it.
os.environ["DSPARK_TEST_API_KEY"] = CANARY
#: The key of the "Behind a gateway" snippet of docs/guide/gateway.md (tests/spark/test_gateway.py).
os.environ["LITELLM_API_KEY"] = CANARY

REVIEW_SCHEMA = {
    "title": "review",
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "neutral", "negative"]},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "stars": {"type": "integer", "minimum": 1, "maximum": 5},
        "topics": {"type": "array", "items": {"type": "string"}},
        "reviewed_at": {"type": "string", "format": "date-time"},
        "product": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "price": {"type": "number"}},
            "required": ["name"],
        },
    },
    "required": ["sentiment", "score", "stars", "topics", "reviewed_at", "product"],
}


def write_prompts(directory: Path, name: str, rows: list[dict]) -> Path:
    """Write a JSONL prompt file atomically (hidden name, then rename), as a producer should."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    final = directory / name
    tmp.rename(final)
    return final


def chat(*contents: str | None, finish: str = "stop") -> str:
    """A chat completion body with one choice per content, each ending with ``finish``."""
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": c},
                    "finish_reason": finish,
                }
                for i, c in enumerate(contents)
            ],
        }
    )


def assert_same_tables(ours: Any, reference: Any, bodies: list[str]) -> None:
    """The two tables equal, else the first rows that differ, column by column (with a body)."""
    for name in reference.column_names:
        a, b = ours.column(name).to_pylist(), reference.column(name).to_pylist()
        wrong = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        assert not wrong, f"{name}: rows {wrong[:5]} differ, e.g. {bodies[wrong[0]][:300]!r}"
    assert ours.equals(reference)


def home_like(directory: Path) -> list[Path]:
    """A home-like directory at ``directory``: a ``.bashrc`` and an expired lease named as a
    cache's claims name theirs, both written an hour ago (what a sweep of stale leases run where
    a symbolic link points would delete). The files, which must all be kept."""
    directory.mkdir()
    kept = [directory / ".bashrc", directory / "otherhost-9-0123456789ab.lease"]
    kept[0].write_text("alias ll='ls -l'\n")
    kept[1].write_text(json.dumps({"expires": time.time() - 3600}))
    for path in kept:
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    return kept
