"""While endpoints rest, the log says so on a timer (which endpoint, how many prompts wait and
for how long, the deadline); an outage of every endpoint that outlasts the deadline fails the
prompts that start after it at once instead of each waiting a deadline of its own."""

import asyncio
import logging

import pytest

from dspark_json.http.endpoints import Endpoint, EndpointPool, NoEndpoint

A, B = Endpoint("http://a.test"), Endpoint("http://b.test")


async def until_logged(caplog, text: str) -> logging.LogRecord:
    """The first record holding ``text``, waited for by event (the loop turns), not by time."""
    while True:
        for record in caplog.records:
            if text in record.getMessage():
                return record
        await asyncio.sleep(0.01)


async def down(_: Endpoint) -> bool:
    return False


def test_a_warn_names_the_endpoint_the_waiting_prompts_and_the_deadline(caplog):
    caplog.set_level(logging.WARNING, logger="dspark_json")

    async def scenario() -> str:
        pool = EndpointPool([A], down, deadline=600, backlog=lambda: 7, warn_every=0.05)
        for _ in range(3):
            pool.failed(A)
        waiters = [asyncio.create_task(pool.pick(60)) for _ in range(2)]
        record = await asyncio.wait_for(until_logged(caplog, "not answering /v1/models"), 30)
        for waiter in waiters:
            waiter.cancel()
        await pool.close()
        assert record.levelno == logging.WARNING
        return record.getMessage()

    message = asyncio.run(scenario())
    assert "Endpoint http://a.test (for " in message
    assert "no endpoint is left to send to" in message
    assert "2 prompt(s) of this task wait for an endpoint" in message
    assert "7 more not started" in message
    assert "requestDeadline=600s" in message


def test_with_another_endpoint_up_the_warn_says_requests_go_there(caplog):
    caplog.set_level(logging.WARNING, logger="dspark_json")

    async def scenario() -> tuple[str, Endpoint]:
        pool = EndpointPool([A, B], down, deadline=60, warn_every=0.05)
        for _ in range(3):
            pool.failed(A)
        record = await asyncio.wait_for(until_logged(caplog, "not answering /v1/models"), 30)
        picked = await pool.pick(1)
        await pool.close()
        return record.getMessage(), picked

    message, picked = asyncio.run(scenario())
    assert "requests go to the 1 other endpoint(s)" in message and "0 prompt(s)" in message
    assert picked == B


def test_once_every_endpoint_was_down_a_whole_deadline_new_prompts_give_up_at_once():
    async def scenario() -> None:
        pool = EndpointPool([A], down, deadline=0.2)
        for _ in range(3):
            pool.failed(A)
        with pytest.raises(NoEndpoint):
            await pool.pick(0.2)  # the first prompt waits its deadline
        # A prompt that starts now would wait 600 s of its own (wait_for would time out with
        # TimeoutError, not NoEndpoint); the outage is older than the deadline already.
        with pytest.raises(NoEndpoint):
            await asyncio.wait_for(pool.pick(600), 30)
        await pool.close()

    asyncio.run(scenario())


def test_an_endpoint_back_from_a_rest_is_on_probation_until_a_completion_succeeds(monkeypatch):
    """Back once its probe answers; its completions then decide: one failure rests it again
    (not three), one success clears it."""
    monkeypatch.setattr("dspark_json.http.endpoints._PROBE_FIRST_S", 0.01)
    probes: list[Endpoint] = []

    async def up(endpoint: Endpoint) -> bool:
        probes.append(endpoint)
        return True

    async def scenario() -> list[int]:
        pool = EndpointPool([A], up, deadline=60)
        rests = []
        for _ in range(3):
            pool.failed(A)
        rests.append(pool.rests)
        assert await pool.pick(5) == A  # back after its probe
        pool.failed(A)  # on probation: one failure rests it again
        rests.append(pool.rests)
        assert await pool.pick(5) == A
        pool.succeeded(A)  # a completion went through: probation over
        pool.failed(A)
        pool.failed(A)
        rests.append(pool.rests)
        await pool.close()
        return rests

    assert asyncio.run(scenario()) == [1, 2, 2]
    assert probes == [A, A]
