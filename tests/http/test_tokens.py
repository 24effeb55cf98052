"""Token budgets (http.tokens): options maxTokensPerMinute and maxTokensInFlight, the estimate
before an answer and the usage after it."""

import asyncio
import json

import httpx
import pytest

from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.tokens import COMPLETION_ESTIMATE, TokenBudget, estimate, used_tokens


def test_the_estimate_is_the_body_over_four_plus_max_tokens():
    body = json.dumps({"messages": [{"content": "x" * 400}], "max_tokens": 100}).encode()
    assert estimate(body) == len(body) // 4 + 100
    assert estimate(b'{"messages": []}') == 16 // 4 + COMPLETION_ESTIMATE
    answer = b'{"choices": [], "usage": {"prompt_tokens": 7, "total_tokens": 19}}'
    assert used_tokens(answer) == 19 and used_tokens(b"{}") is None


def test_in_flight_tokens_at_one_endpoint_wait_for_room_and_a_big_one_goes_alone():
    async def run() -> list[str]:
        budget = TokenBudget(per_minute=None, in_flight=100)
        order: list[str] = []
        loop = asyncio.get_running_loop()
        assert await budget.acquire("a", 80, loop.time() + 5)
        second = asyncio.ensure_future(budget.acquire("a", 30, loop.time() + 5))
        other = await budget.acquire("b", 500, loop.time() + 5)  # alone at b: goes
        await asyncio.sleep(0.05)
        order.append(f"second waits: {not second.done()}, b alone: {other}")
        budget.release("a", 80, 80)
        assert await second
        assert not await budget.acquire("a", 90, loop.time() + 0.05)  # no room in time
        return order

    assert asyncio.run(run()) == ["second waits: True, b alone: True"]


@pytest.fixture
def no_waits(monkeypatch):
    monkeypatch.setattr("dspark_json.http.client.backoff", lambda attempt: 0.0)


def test_the_minute_holds_what_the_answers_used_and_a_request_past_it_waits(no_waits):
    """200 tokens a minute, each answer 190: the second request waits for the first to leave
    the minute, until its deadline: held back, nothing sent."""
    sent: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(1)
        return httpx.Response(200, json={"choices": [], "usage": {"total_tokens": 190}})

    config = HttpOptions(
        endpoints=(Endpoint("http://gw.test"),),
        max_tokens_per_minute=200,
        max_concurrency=1,
        request_deadline=0.5,
    )
    requests = [{"model": "m", "max_tokens": 10, "i": i} for i in range(2)]
    fetched = complete_all(requests, config, transport=httpx.MockTransport(handler))
    assert fetched.outcomes[0].error is None
    error = fetched.outcomes[1].error
    assert error is not None and "maxTokensPerMinute" in error["message"]
    assert len(sent) == 1 and fetched.stats.held_s > 0.3


def test_a_share_under_one_request_warns_once(caplog):
    """maxTokensPerMinute=200000 over 1000 tasks is 200 a task, less than one request of
    maxTokens 256: each task still sends one request a minute (one alone over its share goes),
    1000 of them: a WARN says so, once."""
    from dspark_json.source import warn_small_share

    with caplog.at_level("WARNING", logger="dspark_json"):
        warn_small_share(200_000, 1000, 256)
        warn_small_share(200_000, 1000, 256)
        warn_small_share(200_000, 10, 256)  # 20000 each: room
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "maxTokensPerMinute=200000" in warned[0]
    assert "200 tokens a minute each" in warned[0] and "partitionSize" in warned[0]


def test_the_last_micro_batches_spend_counts_in_the_minute(no_waits):
    """maxTokensPerMinute=200, and the driver says the last micro-batch spent 150 of it 10 s
    ago (its records): a request of 100 waits (until its deadline), where a fresh minute sent
    it at once."""
    import time

    sent: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(1)
        return httpx.Response(200, json={"choices": [], "usage": {"total_tokens": 90}})

    def run(spent: tuple[tuple[float, int], ...]) -> int:
        sent.clear()
        config = HttpOptions(
            endpoints=(Endpoint("http://gw.test"),),
            max_tokens_per_minute=200,
            max_concurrency=1,
            request_deadline=0.3,
            tokens_spent=spent,
        )
        requests = [{"model": "m", "max_tokens": 90}]  # ~100 tokens estimated
        complete_all(requests, config, transport=httpx.MockTransport(handler))
        return len(sent)

    assert run(()) == 1
    assert run(((time.time() - 10, 150),)) == 0  # the minute is the stream's, not the batch's
    assert run(((time.time() - 61, 150),)) == 1  # out of the minute: forgotten


def test_the_driver_carries_the_minute_and_learns_the_pool_width_from_records():
    """From the last micro-batches' metrics records: each task's tokens spread over its
    window (those still in the minute kept), the machines that ran them and the most tasks
    that ran at once (at most the next batch's partitions)."""
    from datetime import UTC, datetime

    from dspark_json.source import pool_width, tokens_spent

    now = 1_000_000.0

    def record(batch: int, machine: str, end: float, seconds: float, tokens: int) -> dict:
        at = datetime.fromtimestamp(end, UTC).isoformat()
        return {
            "batch": batch,
            "machine": machine,
            "at": at,
            "http_seconds": seconds,
            "parse_seconds": 0.0,
            "prompt_tokens": tokens,
            "completion_tokens": 0,
        }

    records = [
        record(1, "a", now - 100, 30, 600),  # out of the minute
        record(2, "a", now - 20, 60, 600),  # from now - 80 to now - 20: 4 of 6 slices in it
        record(2, "a", now - 10, 20, 60),
        record(2, "b", now - 5, 30, 60),  # three at once at now - 15
    ]
    spent = tokens_spent(records, now)
    assert sum(t for _, t in spent) == 400 + 60 + 60
    assert all(now - 60 < at <= now for at, _ in spent)
    assert pool_width(records, 8, now) == (2, 3)
    assert pool_width(records, 2, now) == (2, 2)  # at most the batch's partitions
    assert pool_width([], 8, now) is None
    assert pool_width(records, 8, now + 10_000) is None  # too old to say


def test_a_micro_batchs_partitions_carry_the_width_and_the_minute_to_their_tasks():
    """The stream's planning hands each partition what the last micro-batches' records say: the
    pool's width (with maxServerQueue) and its even share of the minute's spend (with
    maxTokensPerMinute)."""
    import time
    from datetime import UTC, datetime

    from dspark_json.inputs.listing import PromptPartition
    from dspark_json.options import Options
    from dspark_json.source import _carried

    base = {"endpoint": "http://h:1", "prompts": "/p", "model": "m"}
    options = Options.parse({**base, "maxServerQueue": "0", "maxTokensPerMinute": "100000"})
    now = time.time()
    records = [
        {
            "batch": 3,
            "machine": m,
            "at": datetime.fromtimestamp(now - 5, UTC).isoformat(),
            "http_seconds": 12.0,
            "parse_seconds": 0.0,
            "prompt_tokens": 600,
            "completion_tokens": 0,
        }
        for m in ("a", "b")
    ]
    planned = [PromptPartition(index=i, segments=()) for i in range(2)]
    carried = _carried(planned, records, options)
    assert [p.pool_width for p in carried] == [(2, 2), (2, 2)]
    assert all(sum(t for _, t in p.tokens_spent) == 600 for p in carried)  # 1200 / 2 tasks
    assert _carried(planned, [], options) == planned  # the first micro-batch: nothing known
    plain = Options.parse(base)
    assert _carried(planned, records, plain) == planned  # neither option: nothing carried
