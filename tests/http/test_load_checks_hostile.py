"""The checks at .load() against hostile options and servers (issue 53): option healthPath with
a control character, 100 KB of it or a '..' segment refused naming the option; a /v1/models
with a million ids makes a bounded message; many endpoints are checked in parallel within a
bounded total time, each endpoint known down skipped by the later checks."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest

from dspark_json.errors import OptionError, ServerError
from dspark_json.http import preflight
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.preflight import check_model, check_priority
from dspark_json.options import Options
from tests.raw_servers import Request, raw_server, response


def parse(**options: str) -> Options:
    return Options.parse({"endpoint": "http://127.0.0.1:1", "prompts": "/p", **options})


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/hea\tlth", "a control character ('\\t')"),
        ("/health\x00", "a control character ('\\x00')"),
        ("/" + "h" * 100_000, "100001 characters long, over 1024"),
        ("/../../../health", "a '.' or '..' segment"),
        ("/v1/%2E%2e/health", "a '.' or '..' segment"),
        ("/./health", "a '.' or '..' segment"),
        ("/%2e%2e%2F..%2fhealth", "an encoded '/' or a '\\'"),
        ("/..\\..\\health", "an encoded '/' or a '\\'"),
    ],
)
def test_a_health_path_with_a_control_character_huge_or_escaping_is_refused(path, said):
    with pytest.raises(OptionError) as caught:
        parse(healthPath=path)
    message = str(caught.value)
    assert "Option 'healthPath'" in message and said in message and "'/health'" in message
    assert len(message) < 600


def test_a_health_path_with_dots_inside_a_segment_is_accepted():
    assert parse(healthPath="/health/v1.2..x").http.health_path == "/health/v1.2..x"


# The checks against many endpoints and big answers: raw servers on 127.0.0.1.


def test_a_model_list_of_a_million_ids_makes_a_message_of_a_few_lines():
    """/v1/models with 1,000,000 ids: the error about the model named them all (8.9 MB)."""
    ids = [{"id": f"model-{i:07d}", "object": "model"} for i in range(1_000_000)]
    listing = response(200, {"object": "list", "data": ids})

    def handler(request: Request) -> bytes | None:
        return listing if request.path == "/v1/models" else response(404, {})

    with raw_server(handler) as server:
        options = HttpOptions(
            endpoints=(Endpoint(server.url),), max_response_bytes=64 << 20, health_path=None
        )
        with pytest.raises(ServerError) as caught:
            check_model(options, "wanted")
    message = str(caught.value)
    assert len(message) < 1000
    assert "model-0000000" in message and "and 999995 more (1000000 in all)" in message


class Slow:
    """A server whose every /v1/models answer takes ``delay`` s; it counts the requests in
    progress at once (any base path: one server stands for many endpoints)."""

    def __init__(self, delay: float) -> None:
        self.delay, self.now, self.most, self.lock = delay, 0, 0, threading.Lock()

    def __call__(self, request: Request) -> bytes | None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.delay)
        with self.lock:
            self.now -= 1
        if request.path.endswith("/v1/models"):
            return response(200, {"object": "list", "data": [{"id": "m"}]})
        return response(200, {"choices": []})


def many(url: str, count: int) -> HttpOptions:
    endpoints = tuple(Endpoint(f"{url}/replica{i}") for i in range(count))
    return HttpOptions(endpoints=endpoints, health_path=None)


def test_endpoints_are_checked_in_parallel_with_a_bounded_number_of_connections(monkeypatch):
    """10,000 endpoints were checked one at a time (about 45 minutes)."""
    monkeypatch.setattr(preflight, "CHECK_CONNECTIONS", 4)
    slow = Slow(0.3)
    with raw_server(slow) as server:
        assert check_model(many(server.url, 12), "m") == ("m", None)
    assert 2 <= slow.most <= 4


def test_the_checks_are_bounded_in_total_time(monkeypatch, caplog):
    monkeypatch.setattr(preflight, "CHECK_CONNECTIONS", 2)
    monkeypatch.setattr(preflight, "CHECK_TOTAL_S", 1.0)
    slow = Slow(0.4)
    with raw_server(slow) as server, caplog.at_level(logging.WARNING, "dspark_json"):
        assert check_model(many(server.url, 40), "m")[0] == "m"
    said = [r.getMessage() for r in caplog.records if "not checked within 1 s" in r.getMessage()]
    assert len(said) == 1 and "of 40 endpoints" in said[0]
    assert len(server.requests) < 40


def test_the_priority_check_skips_endpoints_found_down_and_probes_in_parallel(monkeypatch, caplog):
    """The priority probe waited 60 s per endpoint, one after the other, even for endpoints
    the model check had just found unreachable."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{closed.getsockname()[1]}"  # nothing listens there
    slow = Slow(0.3)
    with raw_server(slow) as server, caplog.at_level(logging.INFO, "dspark_json"):
        options = HttpOptions(
            endpoints=(Endpoint(down), *many(server.url, 6).endpoints), health_path=None
        )
        assert check_model(options, "m")[0] == "m"
        asked = len(server.requests)
        check_priority(options, "m", 5)
    probes = [r for r in server.requests[asked:] if r.path.endswith("/chat/completions")]
    assert len(probes) == 6 and all(
        json.loads(r.raw.split(b"\r\n\r\n")[1])["priority"] == 5 for r in probes
    )
    assert slow.most >= 2  # in parallel
    assert f"not checked at {down}, found unreachable just before" in caplog.text
