"""Routing by model (:mod:`dspark_json.http.replicas`) and the shared-pool gate (option
maxServerQueue: :mod:`dspark_json.http.gauges`) together, against real servers on 127.0.0.1: a
request is held only at an endpoint that serves its model (whatever name of it the request
uses: the endpoint's gauges, not one model's, are read), a hold spends its deadline (nothing
sent), a replica removed while it holds requests lets them go to the one that took its place,
and a model nobody serves ends ``model_unavailable`` without a request and without a hold."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from dspark_json.dev.local import SimulatorProcess
from dspark_json.http import gauges
from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from tests.raw_servers import Request, gauges_server, raw_server, response

#: vLLM's gauges of a replica of model m with five requests waiting: saturated at maxServerQueue 0.
SATURATED = (
    'vllm:num_requests_running{engine="0",model_name="m"} 16.0\n'
    'vllm:num_requests_waiting{engine="0",model_name="m"} 5.0\n'
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.95\n'
)

#: A replica of model m whose /metrics always shows it saturated.
saturated = gauges_server(SATURATED)


def body(model: str, i: int) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": f"prompt {i}"}]}


@pytest.fixture(scope="module")
def other():
    with SimulatorProcess(model="other") as server:
        yield server


def posts(server) -> int:
    return sum(1 for r in server.requests if r.method == "POST")


def test_a_hold_at_the_gate_of_the_only_replica_of_a_model_spends_its_deadline_sending_nothing(
    other,
):
    with raw_server(saturated) as pool:
        options = HttpOptions(
            endpoints=(Endpoint(pool.url), Endpoint(other.url)),
            max_server_queue=0,
            request_deadline=1.5,
        )
        before = other.stats().get("model:other", 0)
        started = time.monotonic()
        fetched = complete_all([body("m", 0), body("other", 1)], options)
        took = time.monotonic() - started
    held, answered = fetched.outcomes
    assert answered.error is None  # the other model's replica is not held by m's
    assert held.error is not None and held.error["type"] == "timeout"
    assert "held back" in held.error["message"] and held.error["attempts"] == 0
    assert posts(pool) == 0  # nothing sent to the saturated replica
    assert other.stats().get("model:other", 0) - before == 1  # and m's prompt never went there
    assert took < 4  # the deadline, not the deadline twice or a refresh loop's sleep
    assert fetched.stats.held_s >= 1.0


def test_requests_held_at_a_removed_replica_go_to_the_replica_that_took_its_place(
    other, tmp_path: Path
):
    with raw_server(saturated) as pool, SimulatorProcess(model="m") as fresh:
        listing = tmp_path / "replicas.txt"
        listing.write_text(f"{pool.url}\n")
        swapped = threading.Timer(1.0, lambda: listing.write_text(f"{fresh.url}\n"))
        swapped.start()
        options = HttpOptions(
            endpoints=(Endpoint(other.url),),
            endpoints_file=str(listing),
            endpoint_refresh_seconds=0.3,
            max_server_queue=0,
            request_deadline=20,
            max_concurrency=4,
        )
        started = time.monotonic()
        fetched = complete_all([body("m", i) for i in range(8)], options)
        took = time.monotonic() - started
        swapped.join()
        served = fresh.stats().get("model:m", 0)
    assert [o.error for o in fetched.outcomes] == [None] * 8
    assert [json.loads(o.body)["model"] for o in fetched.outcomes] == ["m"] * 8
    assert posts(pool) == 0  # held while it was in the pool, never sent to
    assert served == 8  # each prompt once, at the replica that took its place
    assert took < 10  # not held until requestDeadline (20 s)


def test_a_model_nobody_serves_ends_unavailable_without_a_request_or_a_hold(other, monkeypatch):
    waited: list[str] = []
    wait = gauges.Gate.wait

    async def spy(self, url, headers, limit_s, also=()):
        waited.append(url)
        return await wait(self, url, headers, limit_s, also)

    monkeypatch.setattr(gauges.Gate, "wait", spy)
    options = HttpOptions(
        endpoints=(Endpoint(other.url),), max_server_queue=0, request_deadline=1.0
    )
    before = other.stats()
    fetched = complete_all([body("other", 0), body("ghost", 1)], options)
    after = other.stats()
    answered, unserved = fetched.outcomes
    assert answered.error is None
    assert unserved.error is not None and unserved.error["type"] == "model_unavailable"
    assert unserved.error["attempts"] == 0
    assert after["chat_completions"] - before["chat_completions"] == 1
    assert waited == [other.url]  # the gate saw the served model's request only


def test_the_gate_reads_the_endpoint_whatever_model_the_request_names(other):
    """One vLLM process serves one model, under aliases too, and labels its gauges with the
    first name only: a request for the alias, routed by its own model, is held at the
    saturated replica (a gate that read the series of the request's model, or of option
    model, would find none there and send it)."""

    def aliased(request: Request) -> bytes | None:
        if request.path == "/v1/models":
            models = [{"id": "m", "object": "model"}, {"id": "m-alias", "object": "model"}]
            return response(200, {"object": "list", "data": models})
        return saturated(request)

    with raw_server(aliased) as pool:
        options = HttpOptions(
            endpoints=(Endpoint(pool.url), Endpoint(other.url)),
            max_server_queue=0,
            request_deadline=1.5,
        )
        fetched = complete_all([body("m-alias", 0), body("other", 1)], options)
    held, answered = fetched.outcomes
    assert answered.error is None
    assert held.error is not None and held.error["type"] == "timeout"
    assert "held back" in held.error["message"] and held.error["attempts"] == 0
    assert posts(pool) == 0
