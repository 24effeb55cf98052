"""The driver's checks at .load(), against real HTTP servers on 127.0.0.1 that misbehave."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dspark_json.errors import OptionError, ServerError
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.preflight import check_model, check_server, fetch_served_schema
from dspark_json.http.secrets import Secret
from dspark_json.options import Options

KEY = "zq-canary-preflight-42"
USERINFO = "ann:pa55-canary"

Route = Callable[[BaseHTTPRequestHandler], tuple[int, str]]


@contextmanager
def server(route: Route) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = route(self)
            data = body.encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def echo_auth_on_models(handler: BaseHTTPRequestHandler) -> tuple[int, str]:
    if handler.path == "/health":
        return 200, "{}"
    auth = handler.headers.get("authorization", "")
    # A long message with the header deep inside it: a cut before the mask would keep part.
    return 500, json.dumps({"error": {"message": "z" * 150 + f" header was {auth} " + "z" * 200}})


def test_a_key_echoed_by_v1_models_is_masked_at_load():
    with server(echo_auth_on_models) as url:
        options = HttpOptions(endpoints=(Endpoint(url),), api_key=Secret(KEY))
        with pytest.raises(ServerError) as caught:
            check_server(options, None)
    text = str(caught.value)
    assert "HTTP 500" in text and "Bearer ***" in text
    assert KEY[:6] not in text


def test_url_credentials_echoed_as_basic_are_masked_at_load():
    token = base64.b64encode(USERINFO.encode()).decode()
    with server(echo_auth_on_models) as url:
        endpoint = Endpoint(url, Secret(USERINFO))
        with pytest.raises(ServerError) as caught:
            check_server(HttpOptions(endpoints=(endpoint,)), None)
    assert "Basic ***" in str(caught.value) and token[:6] not in str(caught.value)


def test_the_model_is_the_first_served_or_must_be_served():
    def models(handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        if handler.path == "/health":
            return 200, ""
        return 200, json.dumps({"data": [{"id": "a"}, {"id": "b", "max_model_len": 4096}]})

    with server(models) as url:
        options = HttpOptions(endpoints=(Endpoint(url),))
        assert check_server(options, None) == "a"
        assert check_server(options, "b") == "b"
        assert check_model(options, None) == ("a", None)  # its context: not listed
        assert check_model(options, "b") == ("b", 4096)
        with pytest.raises(ServerError, match=r"Model 'c' is not served .* \(it serves: a, b\)"):
            check_server(options, "c")


def test_the_context_is_the_smallest_the_endpoints_give():
    def serving(length: int | None) -> Route:
        def models(handler: BaseHTTPRequestHandler) -> tuple[int, str]:
            if handler.path == "/health":
                return 200, ""
            return 200, json.dumps({"data": [{"id": "m", "max_model_len": length}]})

        return models

    with (
        server(serving(8192)) as big,
        server(serving(None)) as silent,
        server(serving(2048)) as small,
    ):
        endpoints = (Endpoint(big), Endpoint(silent), Endpoint(small))
        assert check_model(HttpOptions(endpoints=endpoints), "m") == ("m", 2048)
        assert check_model(HttpOptions(endpoints=endpoints[:2]), None) == ("m", 8192)
        assert check_model(HttpOptions(endpoints=endpoints[1:2]), "m") == ("m", None)


def test_a_dead_engine_and_a_refused_key_are_named():
    def dead(handler: BaseHTTPRequestHandler) -> tuple[int, str]:  # vLLM's API server, alone
        if handler.path == "/v1/models":
            return 200, json.dumps({"data": [{"id": "m", "owned_by": "vllm"}]})
        return 503, ""

    with server(dead) as url, pytest.raises(ServerError) as caught:
        check_server(HttpOptions(endpoints=(Endpoint(url),)), None)
    assert f"{url}/health (option 'healthPath' auto: the server says it is vLLM)" in str(
        caught.value
    )
    assert "engine may not be running" in str(caught.value)

    def refusing(handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        return (200, "") if handler.path == "/health" else (401, "{}")

    with server(refusing) as url, pytest.raises(ServerError, match="API key given was refused"):
        check_server(HttpOptions(endpoints=(Endpoint(url),), api_key=Secret(KEY)), None)


def test_a_served_schema_error_masks_the_key():
    def echo(handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        return 404, "x" * 190 + handler.headers.get("authorization", "")

    with server(echo) as url:
        options = HttpOptions(endpoints=(Endpoint(url),), api_key=Secret(KEY))
        with pytest.raises(ServerError, match="schemaEndpoint") as caught:
            fetch_served_schema(options, "/health/json-schema")
    assert KEY[:4] not in str(caught.value)


def models_after(health: tuple[int, str], seen: list[str]) -> Route:
    """/v1/models serves 'm'; ``health`` answers the rest; each path asked is noted."""

    def route(handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        seen.append(handler.path)
        if handler.path == "/v1/models":
            return 200, json.dumps({"data": [{"id": "m"}]})
        return health

    return route


@pytest.mark.parametrize("status", [500, 503])
def test_a_5xx_at_health_names_a_gateway_and_option_health_path_as_the_fix(status):
    with (
        server(models_after((status, '{"detail": "worker 2 down"}'), [])) as url,
        pytest.raises(ServerError) as caught,
    ):
        check_server(HttpOptions(endpoints=(Endpoint(url),), health_path="/health"), None)
    text = str(caught.value)
    assert f"{url}/health (option 'healthPath'='/health') answered HTTP {status}" in text
    assert "worker 2 down" in text and "engine may not be running" in text
    assert "LiteLLM's /health sends a completion" in text and "vllm-router's answers 503" in text
    assert "set option 'healthPath' to ''" in text and "'/health/liveliness'" in text


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (500, '{"error": {"message": "Authentication Error, No api key passed in."}}'),
        (400, '{"error": {"message": "Authentication Error, No connected db."}}'),
        (401, "{}"),
        (403, "{}"),
    ],
)
@pytest.mark.parametrize("keyed", [False, True])
def test_an_answer_about_the_key_at_health_asks_for_the_key_never_printing_it(status, body, keyed):
    def route(handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        echoed = handler.headers.get("authorization", "")
        return status, body.replace("}}", f" ({echoed})" + '"}}') if "}}" in body else body

    key = Secret(KEY) if keyed else None
    with server(route) as url, pytest.raises(ServerError) as caught:
        options = HttpOptions(endpoints=(Endpoint(url),), api_key=key, health_path="/health")
        check_server(options, None)
    text = str(caught.value)
    given = "the API key given was refused" if keyed else "it needs an API key"
    assert f"{url}/health answered HTTP {status}" in text and given in text
    assert "Set option 'apiKeyEnv'" in text and "'apiKey'" in text
    assert KEY not in text and "healthPath" not in text


def test_a_wrong_key_refused_at_v1_models_with_no_connected_db_asks_for_the_key():
    seen: list[str] = []
    refusal = '{"error": {"message": "Authentication Error, No connected db.", "code": "400"}}'

    def route(handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        seen.append(handler.path)
        return (200, "{}") if handler.path == "/health" else (400, refusal)

    with server(route) as url, pytest.raises(ServerError) as caught:
        check_server(HttpOptions(endpoints=(Endpoint(url),), api_key=Secret(KEY)), None)
    text = str(caught.value)
    assert f"{url}/v1/models answered HTTP 400" in text and "No connected db" in text
    assert "the API key given was refused" in text and "option 'model'" not in text
    assert seen == ["/v1/models"]  # healthPath auto: /health only after vLLM's list


@pytest.mark.parametrize("given", ["", "none", " None "])
def test_health_path_empty_or_none_skips_the_liveness_check(given):
    seen: list[str] = []
    options = Options.parse({"endpoint": "http://x", "prompts": "/p", "healthPath": given}).http
    assert options.health_path is None
    with server(models_after((500, "{}"), seen)) as url:
        endpoints = (Endpoint(url),)
        assert check_server(HttpOptions(endpoints=endpoints, health_path=None), None) == "m"
    assert seen == ["/v1/models"]


def test_health_path_is_asked_where_it_points():
    seen: list[str] = []
    with server(models_after((200, "{}"), seen)) as url:
        options = HttpOptions(endpoints=(Endpoint(url),), health_path="/health/liveliness")
        assert check_server(options, None) == "m"
    assert seen == ["/health/liveliness", "/v1/models"]


@pytest.mark.parametrize("given", ["health", "http://x/health", "/health?key=1"])
def test_a_health_path_that_is_not_a_path_is_refused_with_the_fix(given):
    with pytest.raises(OptionError) as caught:
        Options.parse({"endpoint": "http://x", "prompts": "/p", "healthPath": given})
    text = str(caught.value)
    assert "'healthPath'" in text and "starting with '/'" in text and "empty to skip" in text


def vllm_or_gateway(owned_by: str, health: tuple[int, str], seen: list[str]) -> Route:
    """/v1/models serves 'm', each entry ``owned_by`` (vLLM's say vllm, LiteLLM's openai);
    ``health`` answers /health; each path asked is noted."""

    def route(handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        seen.append(handler.path)
        if handler.path == "/v1/models":
            return 200, json.dumps({"data": [{"id": "m", "owned_by": owned_by}]})
        return health

    return route


def test_health_path_auto_asks_health_only_where_the_server_says_vllm():
    """The default: LiteLLM's /health would send a completion to every deployment; vLLM's is
    how its engine says it died."""
    options = Options.parse({"endpoint": "http://x", "prompts": "/p"}).http
    assert options.health_path == "auto"
    seen: list[str] = []
    with server(vllm_or_gateway("openai", (500, "{}"), seen)) as url:
        assert check_server(HttpOptions(endpoints=(Endpoint(url),)), None) == "m"
    assert seen == ["/v1/models"]
    seen.clear()
    with server(vllm_or_gateway("vllm", (200, ""), seen)) as url:
        assert check_server(HttpOptions(endpoints=(Endpoint(url),)), None) == "m"
    assert seen == ["/v1/models", "/health"]


def test_health_path_auto_goes_on_where_a_router_names_unhealthy_workers(caplog):
    """vllm-router passes vLLM's /v1/models on, and its /health is 503 while any worker is
    down, though completions go to the others: a WARN, not a failed .load()."""
    answer = (503, 'Unhealthy servers: ["http://10.0.0.2:8000"]')
    seen: list[str] = []
    with server(vllm_or_gateway("vllm", answer, seen)) as url:
        with caplog.at_level("WARNING", logger="dspark_json"):
            assert check_server(HttpOptions(endpoints=(Endpoint(url),)), None) == "m"
        with pytest.raises(ServerError, match="engine may not be running"):
            check_server(HttpOptions(endpoints=(Endpoint(url),), health_path="/health"), None)
    assert seen == ["/v1/models", "/health", "/health"]  # the strict check: /health first
    assert "some workers behind it are down; going on" in caplog.text
