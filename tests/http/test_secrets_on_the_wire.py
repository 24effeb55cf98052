"""Keys that are not header values, and servers that echo credentials back in every form.

Each server is a real socket on 127.0.0.1 that records the raw bytes it received, so a header
injected by a key holding CR/LF shows as what it is.
"""

from __future__ import annotations

import base64
import json
import logging

import pytest

from dspark_json.errors import OptionError, ServerError
from dspark_json.http.client import complete_all
from dspark_json.http.failures import MESSAGE_CHARS
from dspark_json.http.preflight import check_server, fetch_served_schema
from dspark_json.http.secrets import Secret, redact
from dspark_json.inputs.journal import Journal
from dspark_json.inputs.listing import Position
from dspark_json.options import Options
from tests.raw_servers import Request, alive, completion, raw_server, response

KEY = "zq-hostile-key-5e1d"
ENV = "DSPARK_HOSTILE_KEY"
#: Keys that cannot be sent as a header value, and what the error must call the character.
BAD_KEYS = {
    "crlf-injection": (f"{KEY}\r\nX-Injected: yes", "line break"),
    "lf": (f"{KEY}\nX-Injected: yes", "line break"),
    "non-ascii": (f"{KEY}-é", "non-ASCII"),
    "inner-space": (f"{KEY} more", "space"),
    "nul": (f"{KEY}\x00", "control character"),
    "del": (f"{KEY}\x7f", "control character"),
}


def fragments(secret: str) -> list[str]:
    """Pieces of a secret that must not show anywhere (any 6 characters of it)."""
    return [secret[i : i + 6] for i in range(0, len(secret) - 5, 3)]


def assert_hidden(text: str, secret: str) -> None:
    for piece in fragments(secret):
        assert piece not in text, f"{piece!r} of the secret shows in {text!r}"


def options(url: str, **extra: str) -> Options:
    return Options.parse({"endpoint": url, "prompts": "/tmp/unused-prompts", **extra})


@pytest.mark.parametrize(("key", "kind"), BAD_KEYS.values(), ids=BAD_KEYS)
def test_an_api_key_option_that_is_no_header_value_fails_at_load_without_showing_it(key, kind):
    with raw_server(alive) as server, pytest.raises(OptionError) as caught:
        options(server.url, apiKey=key)
    message = str(caught.value)
    assert "'apiKey'" in message and kind in message and "not shown" in message
    assert_hidden(message, KEY)
    assert server.requests == []


#: An environment variable cannot hold a NUL byte.
ENV_KEYS = {name: bad for name, bad in BAD_KEYS.items() if "\x00" not in bad[0]}


@pytest.mark.parametrize(("key", "kind"), ENV_KEYS.values(), ids=ENV_KEYS)
def test_an_api_key_env_that_is_no_header_value_is_refused_on_the_executor(key, kind, monkeypatch):
    # The documented setup (docs/getting-started/cluster.md): the variable is set only where the
    # tasks run. Nothing may be sent with it: a CR/LF would start a header of the key holder's
    # choosing.
    monkeypatch.setenv(ENV, key)
    with raw_server(alive) as server:
        config = options(server.url, apiKeyEnv=ENV).http
        with pytest.raises(OptionError) as caught:
            complete_all([{"messages": [{"role": "user", "content": "hi"}]}], config)
    message = str(caught.value)
    assert f"{ENV!r} (option 'apiKeyEnv')" in message and kind in message
    assert_hidden(message, KEY)
    assert server.requests == []


def test_an_api_key_env_with_a_line_break_is_refused_on_the_driver_too(monkeypatch):
    monkeypatch.setenv(ENV, f"{KEY}\r\nX-Injected: yes")
    with raw_server(alive) as server, pytest.raises(OptionError) as caught:
        check_server(options(server.url, apiKeyEnv=ENV).http, None)
    assert "apiKeyEnv" in str(caught.value) and "line break" in str(caught.value)
    assert_hidden(str(caught.value), KEY)
    assert server.requests == []


def test_a_key_file_newline_in_the_environment_is_dropped_not_sent(monkeypatch):
    # Secrets mounted from files often end with a newline; the header must end at the key.
    monkeypatch.setenv(ENV, f"  {KEY}\n")
    answer = completion('{"a": 1}')
    with raw_server(lambda r: alive(r) or response(200, answer)) as server:
        fetched = complete_all([{"messages": []}], options(server.url, apiKeyEnv=ENV).http)
    assert fetched.outcomes[0].body is not None
    (sent,) = server.requests
    assert f"authorization: Bearer {KEY}\r\n".encode() in sent.raw


def echo_authorization(request: Request) -> bytes | None:
    """Answers 400 with the Authorization header echoed deep inside a long message."""
    if request.path == "/health":
        return response(200, {})
    header = request.header("authorization")
    # The key straddles the cut: cutting before masking would keep its first characters.
    message = "z" * (MESSAGE_CHARS - 30) + f" Authorization: {header} " + "z" * 300
    return response(400, {"error": {"message": message, "type": "BadRequestError"}})


def test_an_echoed_key_is_masked_before_the_cut_in_error_and_journal(tmp_path, caplog):
    with raw_server(echo_authorization) as server, caplog.at_level(logging.DEBUG):
        config = options(server.url, apiKey=KEY).http
        fetched = complete_all([{"messages": []}, {"messages": []}], config)
    error = fetched.outcomes[0].error
    assert error is not None and " Authorization: Bearer *** zzz" in error["message"]
    journal = Journal(str(tmp_path / "journal"))
    assert journal.save("k", Position("a.jsonl", 2), fetched.outcomes)
    stored = (tmp_path / "journal" / "k.arrow").read_bytes().decode("latin-1")
    for text in (json.dumps([o.error for o in fetched.outcomes]), stored, caplog.text):
        assert_hidden(text, KEY)


def test_url_credentials_are_percent_decoded_and_every_echo_of_them_is_masked():
    password = "p@ss/w0rd-hostile"
    userinfo = f"ann:{password.replace('@', '%40').replace('/', '%2F')}"

    def echo(request: Request) -> bytes | None:
        if request.path == "/health":
            return response(200, {})
        header = request.header("authorization") or ""
        token = header.removeprefix("Basic ")
        shown = f"got {header}; url-safe {token.replace('+', '-').replace('/', '_')}; "
        shown += f"user ann with password {password} refused"
        return response(401, {"message": shown})

    with raw_server(echo) as server:
        host = server.url.removeprefix("http://")
        config = options(f"http://{userinfo}@{host}").http
        fetched = complete_all([{"messages": []}], config)
    sent = server.requests[0].header("authorization")
    assert sent == "Basic " + base64.b64encode(f"ann:{password}".encode()).decode()
    message = fetched.outcomes[0].error["message"]
    assert message.startswith("got Basic ***; url-safe ***; user ann with password *** ")
    assert_hidden(message, password)


def test_a_key_echoed_json_escaped_inside_a_message_is_masked():
    key = "zq-hostile/slash\\back-key"
    escaped = json.dumps(key)[1:-1].replace("/", "\\/")  # as PHP-style gateways write it

    def echo(request: Request) -> bytes | None:
        inner = '{"auth": "Bearer ' + escaped + '"}'  # the request, quoted as JSON text
        return alive(request) or response(403, {"error": {"message": inner}})

    with raw_server(echo) as server:
        fetched = complete_all([{"messages": []}], options(server.url, apiKey=key).http)
    message = fetched.outcomes[0].error["message"]
    assert message == '{"auth": "Bearer ***"}'


def test_a_status_line_that_echoes_the_key_is_masked():
    def status_line(request: Request) -> bytes:
        return f"XTTP/1.1 200 {request.header('authorization')}\r\n\r\n".encode()

    with raw_server(status_line) as server:
        config = options(server.url, apiKey=KEY, maxAttempts="1").http
        fetched = complete_all([{"messages": []}], config)
    error = fetched.outcomes[0].error
    assert error["type"] == "RemoteProtocolError" and "Bearer ***" in error["message"]
    assert_hidden(error["message"], KEY)


def test_redact_covers_the_forms_a_credential_takes_on_the_wire():
    secret = Secret("ann:s3cr3t/pw")
    forms = [
        "ann:s3cr3t/pw",
        base64.b64encode(b"ann:s3cr3t/pw").decode(),
        base64.urlsafe_b64encode(b"ann:s3cr3t/pw").decode().rstrip("="),
        "ann%3As3cr3t%2Fpw",
        "ann:s3cr3t%2Fpw",
        "s3cr3t/pw",
        "ann:s3cr3t\\/pw",
    ]
    for form in forms:
        assert redact(f"<{form}>", [secret]) == "<***>", form


def test_url_credentials_echoed_by_the_schema_endpoint_are_masked_at_load():
    password = "hostile-schema-pw"

    def echo(request: Request) -> bytes | None:
        return alive(request) or response(404, f"no schema for {request.header('authorization')}")

    with raw_server(echo) as server:
        host = server.url.removeprefix("http://")
        config = options(f"http://ann:{password}@{host}").http
        with pytest.raises(ServerError) as caught:
            fetch_served_schema(config, "/schema")
    assert "Basic ***" in str(caught.value)
    assert_hidden(str(caught.value), base64.b64encode(f"ann:{password}".encode()).decode())
