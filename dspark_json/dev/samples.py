"""Sample prompts for the demo, the tests and the benchmarks: review-analysis requests."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["write_sample_prompts"]

_PRODUCTS = ["kettle", "headphones", "desk lamp", "backpack", "coffee grinder", "keyboard"]
_OPINIONS = [
    "arrived broken",
    "works as promised",
    "is louder than expected",
    "exceeded my hopes",
    "stopped working after a week",
    "is fine for the price",
]


def write_sample_prompts(directory: Path, rows: int, *, files: int = 3) -> None:
    """``rows`` review-analysis prompts over ``files`` JSONL files, renamed into place."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-rows // files)
    for f in range(files):
        lines = []
        for i in range(f * per_file, min(rows, (f + 1) * per_file)):
            product = _PRODUCTS[i % len(_PRODUCTS)]
            opinion = _OPINIONS[(i * 7) % len(_OPINIONS)]
            review = f"The {product} {opinion}."
            lines.append(
                json.dumps(
                    {
                        "custom_id": f"review-{i:05d}",
                        "prompt": f"Analyse this product review and answer in JSON: {review}",
                        "product": product,
                        "shard": f,
                    }
                )
            )
        tmp = directory / f".part-{f:05d}.jsonl"
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.rename(directory / f"part-{f:05d}.jsonl")
