"""Identical requests once (option ``dedupe``): which rows of a partition share one request.

Two rows whose request bodies are byte-identical (every option and every per-row field applied:
model, messages, response_format, sampling, ``extraBody``, a batch row's own ``body``) ask the
model the same thing. Where the answer is a function of the body, one request answers both.

Deterministic means: the body sets ``temperature`` to 0 (greedy decoding: each of the ``n``
choices is the most likely text), or sets an integer ``seed`` (vLLM seeds each request's
sampler from it, so the same body draws the same ``n`` choices again). A body without
``temperature`` is not deterministic: the server's default applies (1.0 in vLLM and OpenAI,
or the model's generation config). Greedy decoding on a GPU can still differ in the last
bits between batches of different sizes; a row served another row's answer gets an answer the
model did give to exactly its request, which is what it would get from a re-run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["DEDUPE_MODES", "Dedupe", "Groups", "group", "is_deterministic"]

Dedupe = Literal["auto", "off", "force"]
#: Option ``dedupe``'s values: word -> the value.
DEDUPE_MODES: Mapping[str, Dedupe] = {"auto": "auto", "off": "off", "force": "force"}


def is_deterministic(fields: Mapping[str, Any]) -> bool:
    """Whether a request with these body fields gets the same answer every time it is sent:
    ``temperature`` 0, or an integer ``seed`` (see the module doc)."""
    temperature = fields.get("temperature")
    seed = fields.get("seed")
    greedy = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    seeded = isinstance(seed, int) and not isinstance(seed, bool)
    return (greedy and temperature == 0) or seeded


@dataclass(frozen=True)
class Groups:
    """A partition's rows by request: ``leaders`` send their own request; ``leader_of[row]``
    is the row whose request answers ``row`` (itself for a leader; ``-1``: not sent)."""

    leaders: list[int]
    leader_of: list[int]

    @property
    def followers(self) -> int:
        """Rows answered by another row's request."""
        return sum(1 for row, lead in enumerate(self.leader_of) if lead not in (row, -1))


def group(requests: Sequence[bytes | None], deterministic: Sequence[bool], mode: Dedupe) -> Groups:
    """Group rows by identical request body. ``mode``: ``auto`` joins only deterministic
    requests, ``force`` every identical one, ``off`` none. ``None`` requests are not sent."""
    first: dict[bytes, int] = {}
    leaders: list[int] = []
    leader_of: list[int] = []
    for row, body in enumerate(requests):
        if body is None:
            leader_of.append(-1)
            continue
        joins = mode == "force" or (mode == "auto" and deterministic[row])
        lead = first.setdefault(body, row) if joins else row
        if lead == row:
            leaders.append(row)
        leader_of.append(lead)
    return Groups(leaders=leaders, leader_of=leader_of)
