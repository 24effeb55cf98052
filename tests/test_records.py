"""The records passed between stages: what they compute themselves."""

from __future__ import annotations

from dspark_json.records import ClientStats


def test_two_sends_of_one_task_add_up_per_model_and_keep_the_reuse_figures_once():
    first = ClientStats(
        requests=3,
        retries=1,
        failed=1,
        statuses={"200": 2, "503": 1},
        latencies=[0.1, 0.2],
        limit_peak=8,
        limit_lowest=4,
        limit_final=6,
        model_requests={"a": 2, "b": 1},
        model_latencies={"a": [0.1], "b": [0.2]},
        held_s=1.5,
        cache_hits=5,
        cache_waits=2,
    )
    second = ClientStats(
        requests=2,
        statuses={"200": 2},
        latencies=[0.3, 0.4],
        limit_peak=10,
        limit_lowest=2,
        limit_final=3,
        model_requests={"b": 2},
        model_latencies={"b": [0.3, 0.4]},
        held_s=0.5,
    )
    both = first.then(second)
    assert (both.requests, both.retries, both.failed) == (5, 1, 1)
    assert both.statuses == {"200": 4, "503": 1}
    assert sorted(both.latencies) == [0.1, 0.2, 0.3, 0.4]
    assert (both.limit_peak, both.limit_lowest, both.limit_final) == (10, 2, 3)
    assert both.model_requests == {"a": 2, "b": 3}
    assert {m: sorted(v) for m, v in both.model_latencies.items()} == {
        "a": [0.1],
        "b": [0.2, 0.3, 0.4],
    }
    assert both.held_s == 2.0
    assert (both.cache_hits, both.cache_waits) == (5, 2)
    # nothing sent before: the second send's figures, the reuse figures kept
    assert ClientStats(cache_hits=4).then(second).model_requests == {"b": 2}
    assert ClientStats(cache_hits=4).then(second).cache_hits == 4
    assert first.then(ClientStats()) is first
