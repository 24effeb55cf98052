"""Several models in one stream, and replicas that come and go (options endpointsFile,
endpointRefreshSeconds, resolveEndpoints: :mod:`dspark_json.http.replicas`), against real
simulator processes on 127.0.0.1: each request goes only to a replica that serves its model,
a model nobody serves ends as ``model_unavailable`` without a request, a replica added to the
file is used within the refresh interval and a removed one gets no new request."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest

from dspark_json.dev.local import SimulatorProcess
from dspark_json.dev.simulator import Faults
from dspark_json.errors import OptionError, ServerError
from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.preflight import check_model
from dspark_json.http.replicas import expand, read_endpoints_file, request_model


@pytest.fixture(autouse=True)
def no_proxy_from_the_environment(monkeypatch):
    """A proxy set where the tests run would keep names from being expanded (as it should)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def body(model: str, i: int) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": f"prompt {i}"}]}


@pytest.fixture(scope="module")
def alpha():
    with SimulatorProcess(model="alpha") as server:
        yield server


@pytest.fixture(scope="module")
def beta():
    with SimulatorProcess(model="beta") as server:
        yield server


def config(*servers: SimulatorProcess, **kwargs) -> HttpOptions:
    return HttpOptions(endpoints=tuple(Endpoint(s.url) for s in servers), **kwargs)


def counts(server: SimulatorProcess) -> dict[str, int]:
    return server.stats()


def test_each_request_goes_only_to_the_replica_serving_its_model(alpha, beta):
    before_a, before_b = counts(alpha), counts(beta)
    requests = [body("alpha" if i % 3 else "beta", i) for i in range(60)]
    fetched = complete_all(requests, config(alpha, beta))
    assert [o.error for o in fetched.outcomes] == [None] * 60
    after_a, after_b = counts(alpha), counts(beta)

    def delta(after, before, key):
        return after.get(key, 0) - before.get(key, 0)

    assert delta(after_a, before_a, "model:alpha") == 40
    assert delta(after_b, before_b, "model:beta") == 20
    # Zero at the other: not one request (not even a refused one) went to the wrong replica.
    assert delta(after_a, before_a, "chat_completions") == 40
    assert delta(after_b, before_b, "chat_completions") == 20
    assert delta(after_a, before_a, "status_404") == delta(after_b, before_b, "status_404") == 0
    answered = [json.loads(o.body)["model"] for o in fetched.outcomes]
    assert answered == [r["model"] for r in requests]


def test_a_model_nobody_serves_ends_as_model_unavailable_with_no_request_sent(alpha, beta):
    before = counts(alpha)["chat_completions"], counts(beta)["chat_completions"]
    requests = [body("alpha", 0), body("gamma", 1), body("beta", 2), body("gamma", 3)]
    started = time.monotonic()
    fetched = complete_all(requests, config(alpha, beta, request_deadline=1.5))
    took = time.monotonic() - started
    outcomes = fetched.outcomes
    assert outcomes[0].error is None and outcomes[2].error is None
    for i in (1, 3):
        error = outcomes[i].error
        assert error is not None
        assert error["type"] == "model_unavailable"
        assert error["attempts"] == 0
        assert "'gamma'" in error["message"] and "requestDeadline=1.5s" in error["message"]
        assert f"{alpha.url}: alpha" in error["message"]
    after = counts(alpha)["chat_completions"], counts(beta)["chat_completions"]
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    assert 1.5 <= took < 10


def test_a_replica_that_answers_404_for_the_model_gets_no_more_of_its_requests():
    """One model only (routing starts off): the first 404 for it turns routing by model on,
    the request goes to the replica that serves it, and the other gets none after."""
    with SimulatorProcess(model="alpha") as a, SimulatorProcess(model="beta") as b:
        requests = [body("alpha", i) for i in range(40)]
        fetched = complete_all(requests, config(a, b, prefix_order=False, max_concurrency=2))
        assert [o.error for o in fetched.outcomes] == [None] * 40
        assert counts(a)["model:alpha"] == 40
        assert counts(b).get("status_404", 0) <= 2  # the ones sent before the first answer
        assert counts(b).get("model:alpha", 0) == 0


def test_a_model_that_appears_later_is_used_within_the_refresh_interval(caplog, monkeypatch):
    monkeypatch.setattr("dspark_json.http.replicas.WAIT_WARN_S", 0.3)
    caplog.set_level(logging.WARNING, logger="dspark_json")
    with SimulatorProcess(model="alpha") as a:
        requests = [body("alpha", 0), body("beta", 1)]
        timer = threading.Timer(1.0, a.serve_models, ("alpha", "beta"))
        timer.start()
        try:
            started = time.monotonic()
            fetched = complete_all(
                requests, config(a, endpoint_refresh_seconds=0.5, request_deadline=30)
            )
            took = time.monotonic() - started
        finally:
            timer.cancel()
        assert [o.error for o in fetched.outcomes] == [None, None]
        assert 1.0 <= took < 1.0 + 0.5 + 2  # the refresh after the model came, and margin
        assert counts(a)["model:beta"] == 1
    warned = [m for r in caplog.records if "No endpoint serves model" in (m := r.getMessage())]
    assert warned and "'beta'" in warned[0] and "model_unavailable" in warned[0]


def test_a_replica_added_to_the_file_is_used_and_a_removed_one_left(tmp_path: Path):
    refresh = 0.5
    with (
        SimulatorProcess(model="m", latency=0.02) as a,
        SimulatorProcess(model="m", latency=0.02) as b,
        SimulatorProcess(model="m", latency=0.02) as c,
    ):
        listing = tmp_path / "replicas.txt"
        listing.write_text(f"# the pool\n{b.url}\n\n")
        requests = [body("m", i) for i in range(600)]
        marks: dict[str, float | int] = {}

        def swap() -> None:
            listing.write_text(f"{c.url}  # b is gone\n")
            marks["swapped"] = time.monotonic()
            time.sleep(refresh + 0.5)  # a refresh, and the requests in flight at b finish
            marks["b_after"] = counts(b)["chat_completions"]

        timer = threading.Timer(1.5, swap)
        timer.start()
        options = config(
            a,
            endpoints_file=str(listing),
            endpoint_refresh_seconds=refresh,
            max_concurrency=4,
            adaptive_concurrency=False,
            prefix_order=False,
        )
        fetched = complete_all(requests, options)
        timer.join()
        assert [o.error for o in fetched.outcomes] == [None] * 600
        totals = [counts(s)["chat_completions"] for s in (a, b, c)]
        assert sum(totals) == 600  # each prompt answered once, nothing lost
        assert all(counts(s).get("repeated", 0) == 0 for s in (a, b, c))
        assert totals[1] > 0 and totals[2] > 0  # b before the swap, c after it
        assert totals[1] == marks["b_after"]  # b got no request after the refresh


def test_request_model_reads_the_body_s_model():
    assert request_model(b'{"messages": [], "model": "a\\"b", "seed": 1}') == 'a"b'
    nested = b'{"model": "x", "messages": [{"role": "user", "content": "c", "model": "y"}]}'
    assert request_model(nested) == "x"
    assert request_model(b'{"messages": []}') is None


def test_a_name_expands_to_its_addresses_keeping_the_name_as_host():
    endpoint = Endpoint("https://vllm.pool.svc:8443")
    expanded = expand(endpoint, ["10.0.0.1", "fd00::2"])
    assert [e.url for e in expanded] == ["https://10.0.0.1:8443", "https://[fd00::2]:8443"]
    assert {e.host for e in expanded} == {"vllm.pool.svc:8443"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "cannot be read"),
        ("# nothing yet\n\n", "lists no endpoint"),
        ("http://10.0.0.1:8000\nvllm-b:8000\n", "line 2"),
        ("http://10.0.0.1:8000/v1/chat/completions\n", "base URL"),
    ],
)
def test_endpoints_file_errors_name_the_option_and_the_fix(tmp_path, text, expected):
    path = tmp_path / "replicas.txt"
    if text is not None:
        path.write_text(text)
    with pytest.raises(OptionError) as caught:
        read_endpoints_file(str(path))
    message = str(caught.value)
    assert "'endpointsFile'" in message and expected in message
    assert "http://10.0.0.7:8000" in message or "Give" in message


@pytest.mark.parametrize("value", ["0.5", "0", "-3", "nan", "soon"])
def test_endpoint_refresh_seconds_is_one_second_at_least(value):
    from dspark_json.options import Options

    raw = {"endpoint": "http://h:1", "prompts": "/p", "endpointRefreshSeconds": value}
    with pytest.raises(OptionError) as caught:
        Options.parse(raw)
    message = str(caught.value)
    assert "'endpointRefreshSeconds'" in message and repr(value) in message
    assert "give 1 or more" in message
    raw["endpointRefreshSeconds"] = "1"
    assert Options.parse(raw).http.endpoint_refresh_seconds == 1.0


def test_the_file_s_credentials_never_show(tmp_path):
    path = tmp_path / "replicas.txt"
    path.write_text("http://user:s3cret@10.0.0.1:8000\nnot a url s3cret\n")
    with pytest.raises(OptionError) as caught:
        read_endpoints_file(str(path))
    assert "line 2" in str(caught.value)
    path.write_text("http://user:s3cret@10.0.0.1:8000\n")
    (endpoint,) = read_endpoints_file(str(path))
    assert "s3cret" not in repr(endpoint) and endpoint.url == "http://10.0.0.1:8000"


@pytest.mark.parametrize(
    "line",
    [
        "http://user:qx7#zz9@10.0.0.1:8000",  # a raw # in the password: a fragment to urlsplit
        "http://user:qx7?zz9@10.0.0.1:8000",
        "http://10.0.0.1:8000/v1?sig=qx7zz9",
        "http://10.0.0.1:8000?qx7=zz9",
        "http://user:qx7 zz9@10.0.0.1:8000",
    ],
)
def test_a_line_with_a_query_or_a_raw_hash_is_refused_and_no_part_of_a_secret_shows(tmp_path, line):
    path = tmp_path / "replicas.txt"
    path.write_text(f"# pool\n{line}  # replica a\n")
    with pytest.raises(OptionError, match="line 2 of") as caught:
        read_endpoints_file(str(path))
    message = str(caught.value)
    assert "qx7" not in message and "zz9" not in message
    assert "10.0.0.1:8000" in message  # the line is still recognisable


def test_comments_start_at_a_line_s_start_or_after_a_space(tmp_path):
    path = tmp_path / "replicas.txt"
    path.write_text("# the pool\n\n  http://u:p%23w@10.0.0.1:8000 # a\n#http://10.0.0.2:8000\n")
    (endpoint,) = read_endpoints_file(str(path))
    assert endpoint.url == "http://10.0.0.1:8000"
    assert endpoint.credentials is not None and endpoint.credentials.reveal() == "u:p#w"


def test_a_file_on_a_store_that_cannot_be_read_masks_its_credentials():
    for source in (
        "https://user:s3cr3t@files.invalid/replicas.txt",  # no filesystem for https: not OSError
        "s3://AKIAEXAMPLE:s3cr3t@bucket.invalid/replicas.txt",
    ):
        with pytest.raises(OptionError, match="'endpointsFile'") as caught:
            read_endpoints_file(source)
        assert "s3cr3t" not in str(caught.value) and "cannot be read" in str(caught.value)


def test_load_accepts_a_model_served_by_some_endpoints_and_refuses_one_served_by_none(
    alpha, beta, tmp_path
):
    assert check_model(config(alpha, beta), "beta")[0] == "beta"
    listing = tmp_path / "replicas.txt"
    listing.write_text(f"{beta.url}\n")
    assert check_model(config(alpha, endpoints_file=str(listing)), "beta")[0] == "beta"
    with pytest.raises(ServerError, match="'gamma' is not served by any endpoint"):
        check_model(config(alpha, beta), "gamma")
    with pytest.raises(OptionError, match="'endpointsFile'"):
        check_model(config(alpha, endpoints_file=str(tmp_path / "none.txt")), "alpha")


def test_the_simulator_serves_several_models_and_changes_them_running():
    with SimulatorProcess(model="a,b", faults=Faults(error_shape="nested")) as server:
        import httpx

        listed = httpx.get(f"{server.url}/v1/models").json()
        assert [m["id"] for m in listed["data"]] == ["a", "b"]
        url = f"{server.url}/v1/chat/completions"
        assert httpx.post(url, json=body("b", 0)).json()["model"] == "b"
        refused = httpx.post(url, json=body("c", 0))
        assert refused.status_code == 404
        assert refused.json()["error"] == {
            "message": "The model `c` does not exist. Valid aliases: a, b.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
        server.serve_models("c")
        assert httpx.post(url, json=body("c", 0)).status_code == 200
        assert httpx.post(url, json=body("a", 0)).status_code == 404
        assert counts(server)["model:b"] == counts(server)["model:c"] == 1


def test_the_in_flight_limit_adapts_per_endpoint_and_model():
    """Overload answers for one model cut that model's limit, not another's: after 30 alpha
    requests answered 429 (alpha's limit down to 1), beta's first requests still go 6 and
    more at once (one shared limit holds them to about 3)."""
    import asyncio

    import httpx

    lists = {"a.test": "alpha", "b.test": "beta"}
    in_flight = {"beta": 0}
    seen: list[int] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": lists[request.url.host]}]})
        model = json.loads(request.content)["model"]
        if model == "alpha":
            # Not retried: the hint is beyond requestDeadline.
            busy = {"error": {"message": "busy", "type": "x"}}
            return httpx.Response(429, json=busy, headers={"Retry-After": "60"})
        in_flight["beta"] += 1
        seen.append(in_flight["beta"])
        await asyncio.sleep(0.05)
        in_flight["beta"] -= 1
        return httpx.Response(200, json={"choices": []})

    options = HttpOptions(
        endpoints=(Endpoint("http://a.test"), Endpoint("http://b.test")),
        max_concurrency=8,
        initial_concurrency=8,
        max_attempts=1,
        request_deadline=30,
        prefix_order=False,
    )
    requests = [body("alpha", i) for i in range(30)] + [body("beta", i) for i in range(30)]
    fetched = complete_all(requests, options, transport=httpx.MockTransport(handler))
    assert [o.error is None for o in fetched.outcomes] == [False] * 30 + [True] * 30
    assert max(seen[:12]) >= 6, seen


@pytest.mark.parametrize(
    ("addresses", "resolve", "hosts"),
    [
        (["10.0.0.1", "10.0.0.2"], False, {"10.0.0.1", "10.0.0.2"}),  # several: each one
        (["10.0.0.1"], True, {"10.0.0.1"}),  # one, and the option asks
        (["10.0.0.1"], False, {"vllm.pool.test"}),  # one: as today, the name
    ],
)
def test_a_name_stands_for_its_addresses_keeping_host_and_tls_name(
    monkeypatch, addresses, resolve, hosts
):
    import httpx

    async def resolved(host, port):
        assert (host, port) == ("vllm.pool.test", 8443)
        return addresses

    monkeypatch.setattr("dspark_json.http.replicas._addresses", resolved)
    seen: list[tuple[str, str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        sni = request.extensions.get("sni_hostname")
        seen.append((request.url.host, request.headers["host"], sni))
        return httpx.Response(200, json={"choices": []})

    options = HttpOptions(
        endpoints=(Endpoint("https://vllm.pool.test:8443"),),
        resolve_endpoints=resolve,
        prefix_order=False,
    )
    fetched = complete_all(
        [body("m", i) for i in range(20)], options, transport=httpx.MockTransport(handler)
    )
    assert all(o.error is None for o in fetched.outcomes)
    assert {host for host, _, _ in seen} == hosts
    assert {header for _, header, _ in seen} == {"vllm.pool.test:8443"}
    expanded = hosts != {"vllm.pool.test"}
    assert {sni for _, _, sni in seen} == ({"vllm.pool.test"} if expanded else {None})


def test_a_file_empty_for_a_moment_mid_run_keeps_the_replicas_read_before(tmp_path):
    with (
        SimulatorProcess(model="alpha", latency=0.02) as a,
        SimulatorProcess(model="alpha", latency=0.02) as b,
    ):
        listing = tmp_path / "replicas.txt"
        listing.write_text(f"{b.url}\n")
        emptied = threading.Timer(0.3, listing.write_text, ("",))  # being rewritten in place
        written = threading.Timer(0.5, listing.write_text, (f"{b.url}\n",))
        emptied.start()
        written.start()
        options = config(
            a,
            endpoints_file=str(listing),
            endpoint_refresh_seconds=0.1,
            max_concurrency=2,
            adaptive_concurrency=False,
            prefix_order=False,
        )
        fetched = complete_all([body("alpha", i) for i in range(100)], options)
        emptied.join()
        written.join()
        assert all(o.error is None for o in fetched.outcomes)
        assert counts(b)["chat_completions"] >= 40  # about half: b stayed in the pool


def test_an_endpoints_file_alone_scaled_to_zero_and_back_pauses_and_every_prompt_lands(
    tmp_path, caplog
):
    """Option endpointsFile alone (no endpoint): the file emptied (the pool scaled to zero)
    pauses sending, the prompts wait, and go once a replica is listed again."""
    caplog.set_level(logging.WARNING, logger="dspark_json")
    with SimulatorProcess(model="alpha", latency=0.2) as a:  # 4 s of work at 2 at once
        listing = tmp_path / "replicas.txt"
        listing.write_text(f"{a.url}\n")
        threading.Timer(0.2, listing.write_text, ("# scaled to zero\n",)).start()
        back = threading.Timer(6.0, listing.write_text, (f"{a.url}\n",))
        back.start()
        options = HttpOptions(
            endpoints=(),
            endpoints_file=str(listing),
            endpoint_refresh_seconds=0.1,
            max_concurrency=2,
            adaptive_concurrency=False,
            request_deadline=60,
        )
        fetched = complete_all([body("alpha", i) for i in range(40)], options)
        back.join()
        stats = counts(a)
    assert [o.error for o in fetched.outcomes] == [None] * 40
    assert stats["chat_completions"] == 40  # each prompt once
    assert "No endpoint is left" in caplog.text  # paused at zero, then went on


def _mock_pool(seen: list[str]):
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        seen.append(request.url.host)
        return httpx.Response(200, json={"choices": []})

    return httpx.MockTransport(handler)


def test_a_name_that_does_not_resolve_at_task_start_is_still_sent_to(monkeypatch):
    """resolveEndpoints with DNS failing for a moment as the task starts: the name stays the
    endpoint (the request's own lookup may well succeed) instead of the pool becoming empty
    and every prompt waiting to its deadline as model_unavailable."""
    import socket

    async def fails(host, port):
        raise socket.gaierror("Temporary failure in name resolution")

    monkeypatch.setattr("dspark_json.http.replicas._addresses", fails)
    seen: list[str] = []
    options = HttpOptions(
        endpoints=(Endpoint("http://vllm.pool.test:8000"),),
        resolve_endpoints=True,
        request_deadline=1.0,
        prefix_order=False,
    )
    fetched = complete_all([body("m", i) for i in range(5)], options, transport=_mock_pool(seen))
    assert [o.error for o in fetched.outcomes] == [None] * 5
    assert set(seen) == {"vllm.pool.test"}


def test_a_name_reached_through_a_proxy_is_not_replaced_by_its_addresses(monkeypatch):
    """A name behind HTTPS_PROXY (a public API whose name has several addresses, a company
    proxy that allows names only): the proxy resolves it; sending to the addresses this
    machine resolved would CONNECT to bare IPs the proxy may refuse."""

    async def resolved(host, port):
        return ["10.0.0.1", "10.0.0.2"]

    monkeypatch.setattr("dspark_json.http.replicas._addresses", resolved)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp.test:3128")
    monkeypatch.setenv("https_proxy", "http://proxy.corp.test:3128")
    seen: list[str] = []
    options = HttpOptions(endpoints=(Endpoint("https://api.llm.test"),), prefix_order=False)
    fetched = complete_all([body("m", i) for i in range(5)], options, transport=_mock_pool(seen))
    assert [o.error for o in fetched.outcomes] == [None] * 5
    assert set(seen) == {"api.llm.test"}


def test_a_404_for_a_model_is_not_resent_where_no_other_endpoint_may_serve_it():
    """One gateway without /v1/models that answers 404 for a model it does not know: as before
    routing by model, one request per prompt and the row gets the 404 (not maxAttempts
    requests each, at once, to the same gateway)."""
    import httpx

    chats: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(404, text="Not Found")
        chats.append(json.loads(request.content)["model"])
        message = "The model `ghost` does not exist."
        return httpx.Response(404, json={"error": {"message": message, "type": "NotFound"}})

    options = HttpOptions(
        endpoints=(Endpoint("http://gateway.test"),), request_deadline=5.0, prefix_order=False
    )
    fetched = complete_all(
        [body("ghost", i) for i in range(10)], options, transport=httpx.MockTransport(handler)
    )
    assert [o.error["status"] for o in fetched.outcomes] == [404] * 10
    assert len(chats) == 10


@pytest.mark.parametrize("status", [503, 500, 429])
def test_a_replica_of_the_file_whose_model_list_fails_gets_no_request(tmp_path, status):
    """A replica of endpointsFile whose /v1/models answers 503 (a pod still loading behind a
    sidecar, a restarting server) has not said what it serves: it takes no request, as one
    that does not answer at all, rather than every model's."""
    import httpx

    chats: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            if request.url.host == "b.test":
                return httpx.Response(status, text="upstream not ready")
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        chats.append(request.url.host)
        return httpx.Response(200, json={"choices": []})

    listing = tmp_path / "replicas.txt"
    listing.write_text("http://b.test\n")
    options = HttpOptions(
        endpoints=(Endpoint("http://a.test"),), endpoints_file=str(listing), prefix_order=False
    )
    fetched = complete_all(
        [body("m", i) for i in range(20)], options, transport=httpx.MockTransport(handler)
    )
    assert [o.error for o in fetched.outcomes] == [None] * 20
    assert set(chats) == {"a.test"}


@pytest.mark.parametrize(
    ("resolve", "v6_first", "hosts"),
    [
        (False, False, {"dual.test"}),
        (False, True, {"dual.test"}),
        (True, False, {"10.0.0.1"}),
        (True, True, {"2001:db8::1"}),  # the family the system prefers (its order)
    ],
)
def test_a_dual_stack_name_is_one_server_not_two_replicas(monkeypatch, resolve, v6_first, hosts):
    """One server whose name has an IPv4 and an IPv6 address (A and AAAA records) is one
    replica: not expanded into two endpoints, one of them unreachable where there is no IPv6
    route (its requests then fail over, counted as retries), nor given two shares of the load.
    The addresses kept are those of the family the system lists first."""
    import socket

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        assert host == "dual.test"
        found = [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port)),
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2001:db8::1", port, 0, 0)),
        ]
        return found[::-1] if v6_first else found

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    seen: list[str] = []
    options = HttpOptions(
        endpoints=(Endpoint("http://dual.test:8000"),),
        resolve_endpoints=resolve,
        prefix_order=False,
    )
    fetched = complete_all([body("m", i) for i in range(10)], options, transport=_mock_pool(seen))
    assert [o.error for o in fetched.outcomes] == [None] * 10
    assert set(seen) == hosts


def test_load_checks_priority_at_the_replicas_of_the_endpoints_file_too(tmp_path):
    """Option priority with a replica of endpointsFile that does not schedule by priority:
    .load() fails naming the flag, as it does for option endpoint's servers (else each
    request sent there is refused with a 400 while the stream runs)."""
    from dspark_json.http.preflight import check_priority

    with (
        SimulatorProcess(model="alpha", faults=Faults(scheduling_policy="priority")) as a,
        SimulatorProcess(model="alpha") as fcfs,
    ):
        listing = tmp_path / "replicas.txt"
        listing.write_text(f"{fcfs.url}\n")
        check_priority(config(a), "alpha", 10)  # a alone schedules by priority
        with pytest.raises(ServerError, match="--scheduling-policy priority") as caught:
            check_priority(config(a, endpoints_file=str(listing)), "alpha", 10)
        assert fcfs.url in str(caught.value)


def test_a_kept_alive_tls_connection_is_not_reused_for_another_server_name(tmp_path):
    """Two names that resolve to the same address (two hosts behind one ingress): a request
    whose TLS name is b.test does not ride the connection opened, and verified, for a.test
    (the certificate there names a.test only: a new connection for b.test must fail its
    check, not send the request under a.test's certificate)."""
    import asyncio
    import socket
    import ssl

    import httpx

    from dspark_json.http.transport import StreamTransport
    from tests.http.conftest import self_signed

    cert, key = self_signed(tmp_path, "a.test")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}"

    def answer_on(raw: socket.socket) -> None:
        try:
            with server_context.wrap_socket(raw, server_side=True) as connection:
                while connection.recv(65536):
                    connection.sendall(answer)  # keep-alive: one answer per request
        except (OSError, ssl.SSLError):
            return

    def serve() -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer_on, args=(raw,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    client_context = ssl.create_default_context(cafile=str(cert))
    transport = StreamTransport(client_context)
    url = f"https://127.0.0.1:{port}/v1/models"

    async def get(name: str) -> int:
        request = httpx.Request(
            "GET", url, headers={"host": name}, extensions={"sni_hostname": name}
        )
        response = await transport.handle_async_request(request)
        return response.status_code

    async def both() -> None:
        assert await get("a.test") == 200
        with pytest.raises(httpx.ConnectError, match=r"(?i)certificate|hostname"):
            await get("b.test")
        assert await get("a.test") == 200
        await transport.aclose()

    try:
        asyncio.run(both())
    finally:
        listener.close()


def test_option_priority_is_checked_on_a_replica_before_its_first_request(tmp_path, caplog):
    """A replica of endpointsFile that does not schedule by priority (vLLM's 400) gets none of
    the requests, only the check; one that does gets its share."""
    caplog.set_level(logging.WARNING, logger="dspark_json")
    by_priority = Faults(scheduling_policy="priority")
    with (
        SimulatorProcess(model="alpha", faults=by_priority) as a,
        SimulatorProcess(model="alpha") as fcfs,
        SimulatorProcess(model="alpha", faults=by_priority) as c,
    ):
        listing = tmp_path / "replicas.txt"
        listing.write_text(f"{fcfs.url}\n{c.url}\n")
        requests = [{**body("alpha", i), "priority": 5} for i in range(30)]
        fetched = complete_all(requests, config(a, endpoints_file=str(listing), prefix_order=False))
        refused, taken = counts(fcfs), counts(c)
    assert [o.error for o in fetched.outcomes] == [None] * 30
    assert refused["chat_completions"] == 1 and refused["status_400"] == 1  # the check only
    assert taken["chat_completions"] > 1
    assert "does not schedule by priority" in caplog.text and fcfs.url in caplog.text
