"""Answers reused instead of asked again (options dedupe, cache, cacheMode): which requests are
deterministic, how rows group by identical body, what the cache keys on, keeps and refuses, and
that a bad entry is asked again, never a failed task. Requests go through the real client to a
mock transport that counts them."""

import json
import logging
from collections import Counter

import httpx
import pytest

from dspark_json.http.cache import ENTRY_SUFFIX, ResponseCache
from dspark_json.http.client import complete_all
from dspark_json.http.dedup import group, is_deterministic
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions, RequestOptions
from dspark_json.http.reuse import ReuseOptions, send_once
from dspark_json.records import PromptRecord
from dspark_json.request.body import RequestBuilder
from tests.helpers import chat

HTTP = HttpOptions(endpoints=(Endpoint("http://model.test"),), max_concurrency=4, max_attempts=1)


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


class Server:
    """A mock model server: answers each body with its messages echoed; counts what it got."""

    def __init__(self, status=200):
        self.bodies: Counter[bytes] = Counter()
        self.status = status

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200)
        self.bodies[request.content] += 1
        if self.status != 200:
            return httpx.Response(self.status, json={"error": {"message": "no", "type": "x"}})
        asked = json.loads(request.content)["messages"][-1]["content"]
        return httpx.Response(200, text=chat(json.dumps({"echo": asked})))

    @property
    def sent(self) -> int:
        return sum(self.bodies.values())


def body(prompt, **fields):
    return json.dumps({"messages": [{"role": "user", "content": prompt}], **fields}).encode()


def send(server, requests, deterministic=None, model="m", **options):
    return send_once(
        requests,
        deterministic if deterministic is not None else [True] * len(requests),
        HTTP,
        ReuseOptions(**options),
        model=model,
        send=lambda bodies: complete_all(bodies, HTTP, transport=httpx.MockTransport(server)),
    )


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.0, "n": 3}, True),  # greedy: every choice is the most likely text
        ({"temperature": 0.7, "seed": 42}, True),  # vLLM seeds the request's sampler
        ({"seed": 0, "n": 2}, True),
        ({"temperature": 0.7}, False),
        ({}, False),  # the server's default temperature (1.0 in vLLM)
        ({"temperature": False}, False),
        ({"temperature": 0.7, "seed": True}, False),
        ({"temperature": 0.7, "seed": "42"}, False),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else str(v),
)
def test_deterministic_means_temperature_0_or_a_seed(fields, expected):
    assert is_deterministic(fields) is expected


def test_the_builder_judges_each_row_after_its_own_fields():
    builder = RequestBuilder(RequestOptions(temperature=0.0))
    plain = PromptRecord(custom_id="a", messages=[], fields={}, raw="", where="r1")
    hot = PromptRecord(
        custom_id="b", messages=[], fields={}, raw="", where="r2", overrides={"temperature": 1}
    )
    assert builder.deterministic(plain) and not builder.deterministic(hot)
    assert not RequestBuilder(RequestOptions()).deterministic(plain)


def test_grouping_by_identical_body_per_mode():
    a, b = body("a"), body("b")
    requests = [a, b, a, None, a, b]
    deterministic = [True, False, True, False, True, False]
    auto = group(requests, deterministic, "auto")
    assert auto.leaders == [0, 1, 5] and auto.leader_of == [0, 1, 0, -1, 0, 5]
    assert auto.followers == 2
    force = group(requests, deterministic, "force")
    assert force.leaders == [0, 1] and force.leader_of == [0, 1, 0, -1, 0, 1]
    off = group(requests, deterministic, "off")
    assert off.leaders == [0, 1, 2, 4, 5] and off.followers == 0


def test_identical_requests_are_sent_once_and_every_row_gets_the_answer():
    server = Server()
    requests = [body("a"), body("b"), body("a"), None, body("a")]
    fetched = send(server, requests)
    assert server.sent == 2 and set(server.bodies.values()) == {1}
    out = list(fetched.outcomes)
    assert out[0] == out[2] == out[4] and out[0].body is not None and '\\"a\\"' in out[0].body
    assert out[1].body is not None and '\\"b\\"' in out[1].body
    assert out[3].body is None and out[3].error is None  # not sent, as before
    assert (fetched.stats.deduplicated, fetched.stats.requests) == (2, 2)


def test_sampled_requests_are_each_sent_unless_forced():
    server = Server()
    requests = [body("a")] * 3
    assert send(server, requests, [False] * 3).stats.deduplicated == 0
    assert server.sent == 3
    assert send(server, requests, [False] * 3, dedupe="force").stats.deduplicated == 2
    assert server.sent == 4
    assert send(server, requests, dedupe="off").stats.requests == 3


def test_a_failed_request_fails_each_of_its_rows():
    server = Server(status=400)
    fetched = send(server, [body("a")] * 3)
    assert server.sent == 1
    assert [o.error["status"] for o in fetched.outcomes] == [400] * 3
    assert fetched.stats.failed == 3  # prompts that ended with an error


def test_a_second_run_with_the_cache_sends_nothing(tmp_path):
    requests = [body("a"), body("b"), body("a")]
    first, again = Server(), Server()
    one = send(first, requests, cache=str(tmp_path))
    two = send(again, requests, cache=str(tmp_path))
    assert first.sent == 2 and again.sent == 0
    assert list(one.outcomes) == list(two.outcomes)
    assert (one.stats.cache_hits, one.stats.cache_misses) == (0, 2)
    assert (two.stats.cache_hits, two.stats.cache_misses, two.stats.requests) == (2, 0, 0)
    assert len(list(tmp_path.rglob(f"*{ENTRY_SUFFIX}"))) == 2
    assert not list(tmp_path.rglob(".*"))  # no temporary file left behind


def test_the_cache_key_holds_the_model_and_every_byte_of_the_body(tmp_path):
    cache = ResponseCache(str(tmp_path), "model-a")
    assert cache.key(body("a")) != ResponseCache(str(tmp_path), "model-b").key(body("a"))
    assert cache.key(body("a")) != cache.key(body("a", temperature=0))
    assert cache.key(body("a")) == ResponseCache(str(tmp_path), "model-a").key(body("a"))
    server = Server()
    send(server, [body("a")], cache=str(tmp_path), model="model-a")
    send(server, [body("a")], cache=str(tmp_path), model="model-b")
    assert server.sent == 2  # another model's answer is not this one's


def test_only_deterministic_requests_are_cached_unless_asked(tmp_path):
    server = Server()
    send(server, [body("a")], [False], cache=str(tmp_path))
    send(server, [body("a")], [False], cache=str(tmp_path))
    assert server.sent == 2 and not list(tmp_path.rglob(f"*{ENTRY_SUFFIX}"))
    send(server, [body("a")], [False], cache=str(tmp_path), cache_mode="all")
    fetched = send(server, [body("a")], [False], cache=str(tmp_path), cache_mode="all")
    assert server.sent == 3 and fetched.stats.cache_hits == 1


def test_only_http_200_answers_are_cached(tmp_path):
    failing = Server(status=400)
    send(failing, [body("a")], cache=str(tmp_path))
    assert not list(tmp_path.rglob(f"*{ENTRY_SUFFIX}"))
    ok = Server()
    send(ok, [body("a")], cache=str(tmp_path))
    assert ok.sent == 1  # the error was not served from the cache


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut short (a writer that died, a partial copy)
        lambda data: data[:-3] + b"xyz",  # a flipped byte: the digest does not match
        lambda data: b"not an entry",
        lambda data: b"",
    ],
    ids=["truncated", "altered", "foreign", "empty"],
)
def test_a_corrupt_entry_is_asked_again_with_a_warning(tmp_path, caplog, damage):
    server = Server()
    first = send(server, [body("a")], cache=str(tmp_path))
    (entry,) = tmp_path.rglob(f"*{ENTRY_SUFFIX}")
    entry.write_bytes(damage(entry.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        again = send(server, [body("a")], cache=str(tmp_path))
    assert server.sent == 2 and list(again.outcomes) == list(first.outcomes)
    assert (again.stats.cache_hits, again.stats.cache_misses) == (0, 1)
    assert "corrupt or cut short" in caplog.text and "asked again" in caplog.text
    assert send(server, [body("a")], cache=str(tmp_path)).stats.cache_hits == 1  # rewritten


def test_an_unreadable_entry_is_asked_again(tmp_path, caplog):
    server = Server()
    send(server, [body("a")], cache=str(tmp_path))
    (entry,) = tmp_path.rglob(f"*{ENTRY_SUFFIX}")
    entry.unlink()
    entry.mkdir()  # a directory where the file was: reading it fails
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        fetched = send(server, [body("a")], cache=str(tmp_path))
    assert server.sent == 2 and fetched.outcomes[0].body is not None
    assert "not a regular file" in caplog.text


def test_a_cache_that_cannot_be_written_loses_no_answer(tmp_path, caplog):
    blocked = tmp_path / "cache"
    blocked.write_text("a file, not a directory")
    server = Server()
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        fetched = send(server, [body("a")], cache=str(blocked))
    assert fetched.outcomes[0].body is not None and fetched.outcomes[0].error is None
    assert "could not be written" in caplog.text


def test_the_cache_directory_in_messages_hides_credentials():
    assert "secret" not in repr(ResponseCache("s3://key:secret@bucket/cache", "m"))
