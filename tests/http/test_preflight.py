"""The driver's checks at .load(), against real HTTP servers on 127.0.0.1 that misbehave."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dspark_json.errors import ServerError
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.preflight import check_model, check_server, fetch_served_schema
from dspark_json.http.secrets import Secret

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
    def dead(handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        return 503, ""

    with server(dead) as url, pytest.raises(ServerError, match="engine is not running"):
        check_server(HttpOptions(endpoints=(Endpoint(url),)), None)

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
