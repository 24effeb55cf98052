"""``dspark-json plan``: what a query would send and cost, before a run, without Spark.

:func:`plan_query` takes the reader options as ``.option(...)`` does, runs the checks of
``.load()`` (:meth:`~dspark_json.options.Options.parse`, then :func:`~dspark_json.load.prepare`:
the server's ``/v1/models``, ``healthPath``, the model, the JSON Schema), reads the prompts and
builds each request as a task would (:class:`~dspark_json.request.body.RequestBuilder`),
and counts what would be sent: the requests left after option ``dedupe`` (within each
partition of ``partitionSize`` rows (its default where the slots are not known: 256), as the
tasks group them) and the response cache (option
``cache``: the entries there now), an upper bound of the tokens and, with option ``pricing``,
of the cost.

The prompt tokens are an **estimate** from the prompt text (no tokenizer: one token per
:data:`CHARS_PER_TOKEN` characters of the request's messages, plus :data:`TOKENS_PER_MESSAGE`
per message, which leans high for English); the output tokens are ``maxTokens`` per request
(no bound where ``maxTokens`` is not set).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from dspark_json.cost import cost_usd
from dspark_json.http.cache import ResponseCache
from dspark_json.http.dedup import group
from dspark_json.inputs.listing import Position, PromptListing, partition_size, row_count
from dspark_json.inputs.prompts import read_segment
from dspark_json.load import prepare
from dspark_json.options import Options
from dspark_json.request.body import RequestBuilder

__all__ = [
    "CHARS_PER_TOKEN",
    "TOKENS_PER_MESSAGE",
    "describe_plan",
    "estimate_tokens",
    "plan_query",
]

#: Characters of message text counted as one prompt token (English runs about 4 a token).
CHARS_PER_TOKEN = 3.0
#: Tokens counted for each message's role and the chat template around it.
TOKENS_PER_MESSAGE = 8


def estimate_tokens(messages: Any) -> int:
    """The prompt tokens of a request's ``messages``, estimated (see the module's docs)."""
    if not isinstance(messages, list):
        return 0
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else message
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        total += math.ceil(len(text) / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE
    return total


def plan_query(raw: Mapping[str, str]) -> dict[str, Any]:
    """What a query of options ``raw`` would send (as JSON-ready figures); the checks of
    ``.load()`` first (an :class:`~dspark_json.errors.DSparkJsonError` names what is wrong)."""
    options = Options.parse(raw)
    query = prepare(options)
    location = options.input.location
    listing = PromptListing(location, storage=options.storage.settings, option="prompts")
    segments = listing.segments(Position(), listing.end())
    builder = RequestBuilder(options.request, query.model)
    cache = (
        None
        if options.reuse.cache is None
        else ResponseCache(options.reuse.cache, query.model, storage=options.storage.settings)
    )
    # the slots of a cluster are not known here: the size a query registered without them gets
    size = partition_size(row_count(segments), given=options.input.partition_size, slots=None)
    counted = {"prompts": 0, "invalid": 0, "sendable": 0, "leaders": 0, "cached": 0}
    prompt_tokens = 0

    def partition(records: list[Any]) -> None:
        """One partition of ``size`` rows, as a task groups them: counted, then let go (the
        prompts of a run need not fit in memory at once)."""
        nonlocal prompt_tokens
        bodies = [builder.build(r) if r.problem is None else None for r in records]
        deterministic = [builder.deterministic(r) for r in records]
        leaders = group(bodies, deterministic, options.reuse.dedupe).leaders
        counted["prompts"] += len(records)
        counted["invalid"] += sum(1 for r in records if r.problem is not None)
        counted["sendable"] += sum(1 for b in bodies if b is not None)
        counted["leaders"] += len(leaders)
        hits: set[int] = set()
        if cache is not None:
            looked = [
                row for row in leaders if options.reuse.cache_mode == "all" or deterministic[row]
            ]
            found = cache.get_many([bodies[row] or b"" for row in looked])
            hits = {row for row, body in zip(looked, found, strict=True) if body}
            counted["cached"] += len(hits)
        for row in leaders:
            if row not in hits:
                body = json.loads(bodies[row] or b"{}")
                prompt_tokens += estimate_tokens(body.get("messages"))

    chunk: list[Any] = []
    for segment in segments:
        for record in read_segment(segment):
            chunk.append(record)
            if len(chunk) == size:
                partition(chunk)
                chunk = []
    if chunk:
        partition(chunk)
    cached = counted["cached"]
    requests = counted["leaders"] - cached
    max_tokens = options.request.max_tokens
    output = None if max_tokens is None else max_tokens * requests
    pricing = options.rows.pricing
    cost = (
        None
        if output is None or pricing is None
        else cost_usd(pricing, query.model, prompt_tokens, output)
    )
    return {
        "model": query.model,
        "prompts": counted["prompts"],
        "invalid_prompts": counted["invalid"],
        "partitions": math.ceil(counted["prompts"] / size),
        "deduplicated": counted["sendable"] - counted["leaders"],
        "cache_hits": cached,
        "requests": requests,
        "prompt_tokens_estimate": prompt_tokens,
        "max_tokens": max_tokens,
        "output_tokens_bound": output,
        "cost_usd_bound": cost,
    }


def describe_plan(found: Mapping[str, Any]) -> str:
    """The plan as a few lines of text."""
    cost = found["cost_usd_bound"]
    output = found["output_tokens_bound"]
    return "\n".join(
        [
            f"model {found['model']}: {found['prompts']} prompts "
            f"({found['invalid_prompts']} not sendable) in {found['partitions']} partition(s)",
            f"requests {found['requests']} (after {found['deduplicated']} deduplicated and "
            f"{found['cache_hits']} answered by the cache)",
            f"tokens at most: ~{found['prompt_tokens_estimate']} in (estimated from the prompt "
            f"text), "
            + (
                f"{output} out (maxTokens {found['max_tokens']} per request)"
                if output is not None
                else "out not bounded (set option 'maxTokens' for a bound)"
            ),
            "cost at most: "
            + (
                f"${cost:.4f}"
                if cost is not None
                else "unknown (needs option 'pricing' for the model, and 'maxTokens')"
            ),
        ]
    )
