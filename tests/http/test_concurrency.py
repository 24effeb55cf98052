"""The adaptive in-flight limit (AIMD on queueing latency): slow start, shrinking on queueing and
growing back, and at its edges: what a window's median is, when latency counts as queueing, how
long the baseline is remembered, and the gate never admitting past the limit."""

import asyncio

import pytest

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


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("dspark_json.http.concurrency.time.monotonic", lambda: now[0])
    return now


def window(limit, latencies):
    """One window of completions (a window is ``max(4, limit)`` of them)."""
    assert len(latencies) == max(4, int(limit.limit))
    for latency in latencies:
        limit.on_success(latency)


def test_the_window_median_is_its_middle_latency(clock):
    limit = AdaptiveLimit(8, 64)
    window(limit, [0.25] * 8)  # baseline 0.25; slow start doubles
    assert limit.limit == 16
    # 7 of 16 fast, 9 slow: the median (the 9th) is slow, though a third of them are fast.
    window(limit, [0.25] * 7 + [1.0] * 9)
    assert limit.limit == 16 * 0.8


def test_twice_the_baseline_is_still_not_queueing(clock):
    limit = AdaptiveLimit(4, 64)
    window(limit, [0.25] * 4)
    window(limit, [0.5] * 8)  # exactly tolerance x baseline
    assert limit.limit == 16


def test_the_baseline_is_remembered_for_five_minutes(clock):
    limit = AdaptiveLimit(4, 64)
    window(limit, [0.25] * 4)  # baseline 0.25 at t=1000
    clock[0] += 300.0
    window(limit, [1.0] * 8)  # 300 s later the old baseline still counts: queueing
    assert limit.limit == 8 * 0.8
    forgets = AdaptiveLimit(4, 64)
    window(forgets, [0.25] * 4)
    clock[0] += 300.5
    window(forgets, [1.0] * 8)  # past 5 minutes: the slower server is the new normal
    assert forgets.limit == 16


def test_after_a_cut_the_limit_grows_by_one_not_by_doubling(clock):
    limit = AdaptiveLimit(16, 64)
    limit.on_overload()
    assert limit.limit == 8
    window(limit, [0.25] * 8)
    assert limit.limit == 9


def test_overloads_are_counted_per_window_of_completions():
    limit = AdaptiveLimit(16, 64)
    limit.on_overload()  # 16 -> 8
    for _ in range(4):
        limit.on_success(0.25)
    limit.on_overload()  # 5 completions since the cut: the same window
    assert limit.limit == 8
    for _ in range(3):
        limit.on_success(0.25)
    limit.on_overload()  # 9 since the cut: a new window
    assert limit.limit == 4


def test_a_release_admits_one_waiter_and_never_more_than_the_limit():
    async def scenario():
        limit = AdaptiveLimit(2, 8)
        await limit.acquire()
        await limit.acquire()
        waiters = [asyncio.create_task(limit.acquire()) for _ in range(3)]
        await asyncio.sleep(0)
        limit.release()
        await asyncio.sleep(0)
        assert [w.done() for w in waiters] == [True, False, False]
        assert limit.in_flight == 2
        limit.release()
        limit.release()
        await asyncio.sleep(0)
        assert all(w.done() for w in waiters) and limit.in_flight == 2

    asyncio.run(scenario())
