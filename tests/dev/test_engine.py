"""The simulator's prefix cache and time model (dev/engine.py): cached tokens grow on a repeated
prefix, only whole blocks from the start count, the least recently used blocks go first, and a
prefix is cached when its request is scheduled (a request after it waits for it, as in vLLM);
through the server, usage reports them as vLLM does."""

import asyncio
import json

import httpx
import pytest

from dspark_json.dev.engine import Engine, PrefixCache, prompt_tokens
from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Simulator


def words(tag, n):
    return [f"{tag}{i}" for i in range(n)]


def test_a_repeated_prefix_is_found_in_whole_blocks_from_its_start():
    cache = PrefixCache(capacity=100, block_size=4)
    shared = words("s", 10)
    assert cache.lookup([*shared, "a"]) == (0, 0.0)
    cache.insert([*shared, "a"], 5.0)  # 11 tokens: two full blocks, computed at 5
    assert cache.lookup([*shared, "b", "c"]) == (8, 5.0)
    # The same blocks later in a prompt are not a prefix: the chain starts at the first token.
    assert cache.lookup(["x", *shared])[0] == 0
    # Never the last token: a prompt wholly cached still computes one.
    cache.insert(words("t", 8))
    assert cache.lookup(words("t", 8))[0] == 4


def test_the_least_recently_used_prefix_is_evicted_from_its_end():
    cache = PrefixCache(capacity=4, block_size=2)
    a, b, c = words("a", 5), words("b", 5), words("c", 5)  # two blocks each
    cache.insert(a)
    cache.insert(b)
    assert cache.lookup(a)[0] == 4  # a is now the most recently used
    cache.insert(c)  # 6 blocks > 4: b's two go
    assert len(cache) == 4 and cache.evicted == 2
    assert [cache.lookup(x)[0] for x in (a, b, c)] == [4, 0, 4]
    cache = PrefixCache(capacity=2, block_size=2)
    cache.insert(a)
    cache.insert(words("d", 3))  # one more block: a's last block goes, its first stays
    assert cache.lookup(a)[0] == 2


def test_tokens_are_as_many_as_usage_counts():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    assert len(prompt_tokens(messages)) == 2 + 4 + 2 + 4


def body(*contents):
    messages = [{"role": "user", "content": c} for c in contents]
    return json.dumps({"model": "dspark-sim", "messages": messages}).encode()


def test_a_prefix_is_found_while_it_is_computed_and_waited_for():
    sim = Simulator(engine=Engine(cache_blocks=64, prefill_ms=20.0))
    shared = " ".join(words("w", 64))

    async def timed(question):
        loop = asyncio.get_running_loop()
        started = loop.time()
        reply = await sim.route("POST", "/v1/chat/completions", body(shared, question))
        cached = reply.payload["usage"]["prompt_tokens_details"]["cached_tokens"]
        return cached, loop.time() - started

    async def main():
        return await asyncio.gather(timed("a"), timed("b"))

    # Sent together: the second finds the first's 4 blocks (73 tokens), cached when the first
    # was scheduled, and waits for them; it computes 9 tokens, not 73.
    (first, first_s), (second, second_s) = asyncio.run(main())
    assert (first, second) == (0, 64)
    assert first_s >= 73 * 0.02 * 0.9 and second_s >= first_s
    assert sim.counts["cached_tokens"] == 64 and sim.counts["prompt_tokens"] == 2 * 73


def test_without_a_cache_usage_has_no_details():
    sim = Simulator()
    reply = asyncio.run(sim.route("POST", "/v1/chat/completions", body("hello")))
    assert reply.payload["usage"]["prompt_tokens_details"] is None


def test_bad_engine_settings_are_refused():
    with pytest.raises(ValueError, match="block_size"):
        Engine(block_size=0)


def test_the_server_process_reports_cached_tokens_and_takes_the_modelled_time():
    engine = Engine(cache_blocks=16, prefill_ms=1.0, decode_ms=0.0)
    shared = " ".join(words("w", 200))
    with SimulatorProcess(engine=engine) as server:
        out = []
        for question in ("a", "b"):
            answer = httpx.post(
                f"{server.url}/v1/chat/completions", content=body(shared, question), timeout=10
            )
            out.append(answer.elapsed.total_seconds())
            details = answer.json()["usage"]["prompt_tokens_details"]
        stats = server.stats()
    # 209 tokens; the two share 206, 12 whole blocks (the cache keeps 16): the second finds 192
    # and computes 17.
    assert details == {"cached_tokens": 192}
    assert stats["cached_tokens"] == 192 and stats["prompt_tokens"] == 2 * 209
    assert out[0] >= 0.2 > out[1]  # 209 ms of prefill, then 17
