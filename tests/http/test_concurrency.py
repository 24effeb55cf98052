import asyncio

from dspark_json.http.concurrency import AdaptiveLimit


def feed(limit, latency, windows):
    for _ in range(windows):
        for _ in range(max(4, int(limit.limit))):
            limit.on_success(latency)


def test_slow_start_doubles_then_stops_at_the_maximum():
    limit = AdaptiveLimit(2, 20)
    feed(limit, 0.05, 1)
    assert limit.limit == 4
    feed(limit, 0.05, 5)
    assert limit.limit == 20 and limit.peak == 20


def test_growing_latency_shrinks_the_limit_then_it_grows_by_one():
    limit = AdaptiveLimit(16, 64)
    feed(limit, 0.05, 1)  # baseline 50 ms, limit 32
    assert limit.limit == 32
    feed(limit, 0.5, 1)  # queueing: 10x the baseline
    assert limit.limit == 32 * 0.8
    feed(limit, 0.05, 1)  # back to normal: additive increase now
    assert limit.limit == 32 * 0.8 + 1


def test_overload_halves_at_most_once_per_window():
    limit = AdaptiveLimit(16, 64)
    for _ in range(9):
        limit.on_overload()  # a burst: the first cuts, the next 8 are the same window
    assert limit.limit == 8
    limit.on_overload()  # the ninth since the cut: more than a window (8) later
    assert limit.limit == 4
    assert limit.lowest == 4


def test_never_below_one_and_fixed_when_adaptation_is_off():
    limit = AdaptiveLimit(1, 8)
    for _ in range(100):
        limit.on_overload()
    assert limit.limit == 1
    fixed = AdaptiveLimit(2, 8, adaptive=False)
    fixed.on_overload()
    feed(fixed, 1.0, 3)
    assert fixed.limit == 8


def test_the_gate_admits_at_most_the_limit_and_wakes_waiters_on_growth():
    async def scenario():
        limit = AdaptiveLimit(2, 8)
        await limit.acquire()
        await limit.acquire()
        third = asyncio.create_task(limit.acquire())
        await asyncio.sleep(0)
        assert not third.done() and limit.in_flight == 2
        limit._set(3)  # the limit grows: the waiter gets in
        await asyncio.sleep(0)
        assert third.done() and limit.in_flight == 3
        cancelled = asyncio.create_task(limit.acquire())
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        limit.release()
        assert limit.in_flight == 2  # the cancelled waiter took no slot

    asyncio.run(scenario())
