"""Prefix-aware send order (option ``prefixOrder``): which request goes when, and to which
endpoint, so that vLLM's prefix cache finds the prefixes it has computed.

vLLM keeps the KV of prompt prefixes it has computed (automatic prefix caching, least recently
used out): a request whose long prefix (a system prompt, few-shot examples, a shared document)
was just computed on the same server skips its prefill. Within one partition:

- Requests are sent in the order of their messages' serialised JSON (bytes): a trie's order, so
  that requests sharing the longest prefixes are sent next to each other. Only the send order
  changes: each answer goes back to its own row, and rows leave in their order.
  vLLM caches a request's blocks when it schedules it, so the requests after it that share
  its prefix find it even while it is being computed.
- With several endpoints, requests whose messages share their first :data:`KEY_BYTES` bytes
  (the *prefix key*: a group) go to one endpoint, chosen by rendezvous hashing on that key (the
  same key picks the same endpoint in every task and every run), as far as an even share of the
  partition's requests allows: a group larger than what is left of its endpoint's share goes on
  at the next endpoint of its ranking. The endpoints' sequences are interleaved, so that all of
  them work at once. A request whose endpoint rests (failing, or down) goes to the next
  endpoint of its ranking, as requests go round-robin to the healthy endpoints without this
  option.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest

from dspark_json.http.endpoints import Endpoint

__all__ = ["KEY_BYTES", "SendPlan", "plan", "prefix_key"]

#: How many bytes of a request's messages (serialised) make its prefix key: about 250 tokens.
KEY_BYTES = 1024

_MESSAGES = b'"messages": ['


def _messages(payload: bytes) -> bytes:
    """The request body from its messages on (the request builder writes them first, or last
    where a row brings its own body). Only the order depends on it, never an answer."""
    at = payload.find(_MESSAGES)
    return payload[at:] if at >= 0 else payload


def prefix_key(payload: bytes) -> bytes:
    """What decides a request's group and endpoint: its messages' first :data:`KEY_BYTES`."""
    return _messages(payload)[:KEY_BYTES]


@dataclass(frozen=True)
class SendPlan:
    """The order to send a partition's requests in, and each one's endpoints by preference."""

    order: list[int]  # indexes of the requests, in send order
    rankings: dict[int, tuple[Endpoint, ...]]  # empty with one endpoint


def _ranking(key: bytes, endpoints: Sequence[Endpoint]) -> tuple[Endpoint, ...]:
    """Rendezvous hashing: the endpoints by the hash of (endpoint, key), highest first."""

    def score(endpoint: Endpoint) -> bytes:
        return hashlib.blake2b(endpoint.url.encode() + b"\x00" + key, digest_size=8).digest()

    return tuple(sorted(endpoints, key=score, reverse=True))


def plan(payloads: Sequence[bytes | None], endpoints: Sequence[Endpoint]) -> SendPlan:
    """The send plan of ``payloads`` (``None``: not sent) over ``endpoints``."""
    pending = [i for i, payload in enumerate(payloads) if payload is not None]
    body = {i: _messages(payloads[i] or b"") for i in pending}
    pending.sort(key=lambda i: (body[i], i))
    groups: list[list[int]] = []
    keys: list[bytes] = []
    for i in pending:
        key = body[i][:KEY_BYTES]
        if not keys or key != keys[-1]:
            groups.append([])
            keys.append(key)
        groups[-1].append(i)
    if len(endpoints) < 2:
        return SendPlan(order=pending, rankings={})
    share = -(-len(pending) // len(endpoints))  # an even share, rounded up
    load = dict.fromkeys(endpoints, 0)
    assigned: dict[Endpoint, list[list[int]]] = {e: [] for e in endpoints}
    rankings: dict[int, tuple[Endpoint, ...]] = {}
    # Largest groups first, so that they keep their endpoint; the rest fill the shares.
    for at in sorted(range(len(groups)), key=lambda g: (-len(groups[g]), g)):
        ranking = _ranking(keys[at], endpoints)
        rows = groups[at]
        for endpoint in ranking:
            room = share - load[endpoint]
            if room <= 0:
                continue
            taken, rows = rows[:room], rows[room:]
            load[endpoint] += len(taken)
            assigned[endpoint].append(taken)
            # The endpoint it was given first, then the others in the key's ranking.
            preference = (endpoint, *(e for e in ranking if e != endpoint))
            rankings.update(dict.fromkeys(taken, preference))
            if not rows:
                break
    sequences = []
    for endpoint in endpoints:
        ordered = sorted(assigned[endpoint], key=lambda g: (body[g[0]], g[0]))
        sequences.append([i for group in ordered for i in group])
    order = [i for turn in zip_longest(*sequences) for i in turn if i is not None]
    return SendPlan(order=order, rankings=rankings)
