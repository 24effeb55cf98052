"""Prefix-aware send order (option prefixOrder, http/order.py): requests are sent grouped by
shared message prefix; rows keep their order; a prefix goes
to one endpoint (the same in every run), within an even share, and fails over when it rests."""

import asyncio
import json
import random

import httpx
import pytest

from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.order import KEY_BYTES, plan, prefix_key

A, B, C = Endpoint("http://a.test"), Endpoint("http://b.test"), Endpoint("http://c.test")


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr("dspark_json.http.client.backoff", lambda attempt: 0.0)
    monkeypatch.setattr("dspark_json.http.endpoints._PROBE_FIRST_S", 0.01)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def request(prefix, question, row):
    """A request body as the request builder writes it: messages first."""
    messages = [
        {"role": "system", "content": f"Examples {prefix}: " + "example text " * 120},
        {"role": "user", "content": f"{question} (row {row})"},
    ]
    return json.dumps({"messages": messages, "model": "m", "temperature": 0}).encode()


def shuffled(prefixes=4, each=12, seed=3):
    """Requests of a few long prefixes, shuffled as files scatter them."""
    rows = [(p, q) for p in range(prefixes) for q in range(each)]
    random.Random(seed).shuffle(rows)
    return [request(p, f"q{q}", i) for i, (p, q) in enumerate(rows)], [p for p, _ in rows]


def runs(sequence):
    """How many runs of equal items ``sequence`` holds."""
    return sum(1 for i, x in enumerate(sequence) if i == 0 or x != sequence[i - 1])


def test_requests_are_sent_grouped_by_prefix():
    payloads, prefix_of = shuffled()
    order = plan(payloads, [A]).order
    assert sorted(order) == list(range(len(payloads)))
    sent = [prefix_of[i] for i in order]
    assert runs(sent) == 4 < runs(prefix_of)  # file order: 34 runs
    assert [payloads[i] for i in order] == sorted(payloads)  # longest shared prefixes together


def test_requests_not_sent_are_left_out_and_the_key_is_the_messages_start():
    payloads, _ = shuffled(prefixes=2, each=3)
    payloads[2] = None
    assert 2 not in plan(payloads, [A, B]).order
    own = json.dumps({"model": "m", "max_tokens": 5, "messages": [{"role": "user"}]}).encode()
    assert (
        prefix_key(own).startswith(b'"messages": [') and len(prefix_key(payloads[0])) == KEY_BYTES
    )


def test_a_prefix_goes_to_one_endpoint_the_same_in_every_run_within_even_shares():
    payloads, prefix_of = shuffled(prefixes=6, each=10)
    first = plan(payloads, [A, B, C])
    again = plan(list(payloads), [A, B, C])
    assert first == again
    to = {i: ranking[0] for i, ranking in first.rankings.items()}
    loads = [sum(1 for e in to.values() if e == x) for x in (A, B, C)]
    assert loads == [20, 20, 20]
    # Each prefix on one endpoint, but where an even share splits a group: at most one split
    # per endpoint.
    spread = {p: {to[i] for i in to if prefix_of[i] == p} for p in set(prefix_of)}
    assert sum(len(e) for e in spread.values()) <= 6 + 2
    # The endpoints' sequences are interleaved: each is sent to from the start.
    assert {to[i] for i in first.order[:3]} == {A, B, C}


def test_one_prefix_for_all_is_spread_over_the_endpoints():
    payloads = [request(0, f"q{i}", i) for i in range(30)]
    to = [plan(payloads, [A, B]).rankings[i][0] for i in range(30)]
    assert to.count(A) == to.count(B) == 15


def send(payloads, endpoints, handler, **options):
    config = HttpOptions(
        endpoints=tuple(endpoints), max_concurrency=1, initial_concurrency=1, **options
    )
    return complete_all(payloads, config, transport=httpx.MockTransport(handler))


def test_answers_come_back_to_their_rows_and_the_order_is_off_on_request():
    payloads, prefix_of = shuffled()
    seen = []

    def handler(request):
        seen.append(request.content)
        return httpx.Response(200, content=request.content)

    fetched = send(payloads, [A], handler)
    assert [o.body.encode() for o in fetched.outcomes] == payloads
    grouped = runs([prefix_of[payloads.index(c)] for c in seen])
    seen.clear()
    send(payloads, [A], handler, prefix_order=False)
    assert seen == payloads  # row order
    assert grouped < runs(prefix_of) / 3


def test_a_prefix_fails_over_to_the_next_endpoint_of_its_ranking_when_its_own_is_down():
    payloads, _ = shuffled(prefixes=4, each=6)
    rankings = plan(payloads, [A, B, C]).rankings
    down = rankings[0][0]  # the endpoint of row 0's prefix
    sent = {}

    async def handler(request):
        host = f"http://{request.url.host}"
        if request.url.path == "/v1/models":
            return httpx.Response(503)
        if host == down.url:
            raise httpx.ConnectError("refused", request=request)
        sent.setdefault(request.content, []).append(host)
        return httpx.Response(200, content=request.content)

    fetched = send(payloads, [A, B, C], handler)
    assert all(o.error is None for o in fetched.outcomes)
    for i, payload in enumerate(payloads):
        want = next(e.url for e in rankings[i] if e != down)
        assert sent[payload] == [want]  # its own endpoint, else the next of its ranking


def test_requests_wait_for_a_resting_endpoint_as_without_the_order():
    payloads, _ = shuffled(prefixes=2, each=2)
    state = {"up": False, "tries": 0}

    async def handler(request):
        if request.url.path == "/v1/models":
            state["up"] = True
            return httpx.Response(200)
        if not state["up"]:
            state["tries"] += 1
            raise httpx.ConnectError("refused", request=request)
        await asyncio.sleep(0)
        return httpx.Response(200, content=request.content)

    fetched = send(payloads, [A], handler)
    assert all(o.body is not None for o in fetched.outcomes) and state["tries"] >= 3
