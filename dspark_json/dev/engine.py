"""The simulator's model engine: what a request costs in time, and vLLM's prefix cache.

vLLM keeps the KV of prompt tokens in blocks of 16 tokens; with automatic prefix caching a full
block is known by a hash of its tokens chained to the hash of the block before it, so a block
is found again only after the same tokens from the start of the prompt. Freed blocks stay
cached until their space is needed, least recently used first (a prefix's last blocks before
its first). A request's prefill skips its leading blocks that are cached (never its last
token: vLLM computes at least one), and vLLM reports how many tokens that was as
``usage.prompt_tokens_details.cached_tokens`` when started with
``--enable-prompt-tokens-details``.

:class:`Engine` says how the simulator models this: a request takes ``prefill_ms`` per prompt
token not cached, then ``decode_ms`` per output token; the simulator's ``capacity``
(vLLM's ``max_num_seqs``) bounds the sequences worked on at once, the rest queue. As in vLLM (v1), a
request's blocks are cached when it is scheduled, before they are computed (their hash is of
tokens, not of KV): a request that finds blocks still being computed waits until they are, and
does not compute them again. Prefill is compute-bound: the prefills of the sequences in
flight run one after another (a prefix computed twice costs twice), while their decodes run side
by side. Simplified: running sequences' blocks do not count against ``cache_blocks``, and a
prefill is not cut into chunks that share a step with decodes.

Tokens are the simulator's own (the ones its ``usage`` counts): per message, its role's opening
and closing markers, two newlines, and the words of its content.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Engine", "PrefixCache", "prompt_tokens"]

#: vLLM's default KV block size (tokens per block).
BLOCK_SIZE = 16


@dataclass(frozen=True)
class Engine:
    """How long a request takes, and the prefix cache (``cache_blocks=None``: no cache, and
    ``prompt_tokens_details`` null, as vLLM without ``--enable-prompt-tokens-details``)."""

    cache_blocks: int | None = None  # KV blocks kept for prefixes (LRU beyond)
    block_size: int = BLOCK_SIZE
    prefill_ms: float = 0.0  # per prompt token not cached
    decode_ms: float = 0.0  # per output token

    def __post_init__(self) -> None:
        if self.block_size < 1 or (self.cache_blocks is not None and self.cache_blocks < 0):
            raise ValueError(
                f"block_size must be at least 1 and cache_blocks at least 0, got "
                f"{self.block_size} and {self.cache_blocks}"
            )

    def to_args(self) -> list[str]:
        """The ``dspark-json simulate`` arguments for this engine."""
        args = [
            f"--block-size={self.block_size}",
            f"--prefill-ms={self.prefill_ms}",
            f"--decode-ms={self.decode_ms}",
        ]
        if self.cache_blocks is not None:
            args.append(f"--cache-blocks={self.cache_blocks}")
        return args

    def seconds(self, computed: int, output: int) -> tuple[float, float]:
        """(prefill, decode) seconds of a request that computes ``computed`` prompt tokens and
        writes ``output`` tokens."""
        return computed * self.prefill_ms / 1000, output * self.decode_ms / 1000


def prompt_tokens(messages: Sequence[Any]) -> list[str]:
    """The simulator's tokens of a conversation (as many as its ``usage.prompt_tokens``)."""
    tokens: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role"))
        tokens += [f"<{role}>", "\n", *str(message.get("content", "")).split(), f"</{role}>", "\n"]
    return tokens


class PrefixCache:
    """An LRU of chained block hashes, at most ``capacity`` blocks."""

    def __init__(self, capacity: int, block_size: int = BLOCK_SIZE) -> None:
        self.capacity = capacity
        self.block_size = block_size
        self._blocks: OrderedDict[bytes, float] = OrderedDict()  # hash -> when computed
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def _hashes(self, tokens: Sequence[str]) -> list[bytes]:
        """The hash of each full block of ``tokens``, each chained to the one before."""
        hashes, parent = [], b""
        size = self.block_size
        for start in range(0, len(tokens) - size + 1, size):
            block = "\x00".join(tokens[start : start + size]).encode("utf-8")
            parent = hashlib.sha256(parent + b"\x01" + block).digest()
            hashes.append(parent)
        return hashes

    def lookup(self, tokens: Sequence[str]) -> tuple[int, float]:
        """How many leading tokens of ``tokens`` are cached (whole blocks, never the last
        token), and when the last of those blocks is computed; the blocks found become the
        most recently used."""
        found: list[bytes] = []
        for digest in self._hashes(tokens[: max(0, len(tokens) - 1)]):
            if digest not in self._blocks:
                break
            found.append(digest)
        ready = max((self._blocks[d] for d in found), default=0.0)
        self._touch(found)
        return len(found) * self.block_size, ready

    def insert(self, tokens: Sequence[str], ready: float = 0.0) -> None:
        """Cache every full block of ``tokens``, the ones not cached yet computed at ``ready``,
        evicting the least recently used blocks beyond the capacity."""
        self._touch(self._hashes(tokens), ready)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
            self.evicted += 1

    def _touch(self, hashes: Sequence[bytes], ready: float = 0.0) -> None:
        """Make ``hashes`` the most recently used, the first block last (as vLLM frees a
        request's blocks tail first): a prefix is evicted from its end, never left without
        its start. A block new here is computed at ``ready``."""
        for digest in reversed(hashes):
            self._blocks[digest] = self._blocks.get(digest, ready)
            self._blocks.move_to_end(digest)
