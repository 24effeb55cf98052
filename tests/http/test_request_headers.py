"""Option requestHeaders: checked at .load() (names, values, the client's own headers,
Authorization only when asked for), sent with every request to an endpoint, credential-looking
values masked wherever options are shown."""

import pickle

import httpx
import pytest

from dspark_json import OptionError
from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.headers import request_headers
from dspark_json.http.options import HttpOptions
from dspark_json.options import Options

CANARY = "zq-canary-4d1e"
OBJECTIVE = '{"x-llm-d-inference-objective": "batch-sheddable", "x-llm-d-slo-ttft-ms": 5000}'


def _options(**raw: str) -> Options:
    return Options.parse({"endpoint": "http://gw.test", "prompts": "/tmp/p", **raw})


def test_the_headers_are_parsed_and_numbers_written_as_they_are():
    options = _options(requestHeaders=OBJECTIVE)
    assert options.http.request_headers.sent() == {
        "x-llm-d-inference-objective": "batch-sheddable",
        "x-llm-d-slo-ttft-ms": "5000",
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"Host": "evil"}', ["'Host'", "written by the client"]),
        ('{"content-length": "1"}', ["'content-length'", "Leave it out"]),
        ('{"Transfer-Encoding": "chunked"}', ["'Transfer-Encoding'"]),
        ('{"Connection": "close"}', ["'Connection'"]),
        ('{"x bad": "1"}', ["'x bad'", "not a valid HTTP header name"]),
        ('{"x-a": "1\\r\\nx-b: 2"}', ["'x-a'", "line break", "character 2"]),
        ('{"x-a": "a\\u0000"}', ["'x-a'", "control character"]),
        ('{"x-a": {"b": 1}}', ["'x-a'", "string (or number) value"]),
        ('{"x-a": "1", "X-A": "2"}', ["given twice"]),
        ('["x-a"]', ["JSON object", "got a JSON list"]),
        ('{"Authorization": "Basic abc"}', ["'authorization'", "allowAuthorizationHeader"]),
    ],
)
def test_bad_headers_fail_naming_the_option_and_the_header(text, words):
    with pytest.raises(OptionError) as caught:
        _options(requestHeaders=text)
    message = str(caught.value)
    assert "requestHeaders" in message
    for word in words:
        assert word in message


def test_invalid_json_is_not_quoted_as_it_may_hold_a_credential():
    with pytest.raises(OptionError) as caught:
        _options(requestHeaders='{"x-api-key": "' + CANARY)
    assert CANARY not in str(caught.value)


def test_authorization_is_sent_only_when_asked_for_and_not_beside_a_key():
    options = _options(
        requestHeaders='{"Authorization": "Gateway ' + CANARY + '"}',
        allowAuthorizationHeader="true",
    )
    assert options.http.request_headers.sent()["authorization"] == f"Gateway {CANARY}"
    with pytest.raises(OptionError, match="'apiKey' gives credentials too"):
        _options(
            requestHeaders='{"Authorization": "x"}',
            allowAuthorizationHeader="true",
            apiKey="sk-1",
        )


def test_credential_looking_values_are_masked_in_repr_and_kept_through_pickle():
    options = _options(requestHeaders='{"x-api-key": "' + CANARY + '", "x-tenant": "team-a"}')
    shown = repr(options)
    assert CANARY not in shown and "team-a" in shown and "x-api-key" in shown
    again = pickle.loads(pickle.dumps(options.http.request_headers))
    assert again.sent()["x-api-key"] == CANARY
    assert not request_headers("requestHeaders", "")


def test_the_headers_go_with_every_completion_and_an_echo_is_masked(monkeypatch):
    monkeypatch.setattr("dspark_json.http.client.backoff", lambda attempt: 0.0)
    seen: list[tuple[str, httpx.Headers]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers))
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        return httpx.Response(400, json={"error": {"message": f"bad key {CANARY}"}})

    config = HttpOptions(
        endpoints=(Endpoint("http://gw.test"),),
        request_headers=request_headers("requestHeaders", '{"x-goog-api-key": "' + CANARY + '"}'),
    )
    fetched = complete_all([{"model": "m"}], config, transport=httpx.MockTransport(handler))
    error = fetched.outcomes[0].error
    assert error is not None and CANARY not in error["message"]
    assert all(headers["x-goog-api-key"] == CANARY for _, headers in seen)
    assert seen[-1][1]["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"x-a": "1", "x-a": "2"}', ["'x-a' is given twice"]),
        ('{"x-a": NaN}', ["'x-a'", "not finite"]),
        ('{"x-big": "' + "a" * 1_000_000 + '"}', ["'x-big'", "too long", "8192"]),
        ("{" + ", ".join(f'"x-h{i}": "v"' for i in range(10_000)) + "}", ["10000 headers"]),
        ("{" + ", ".join(f'"x-h{i}": "{"v" * 4000}"' for i in range(4)) + "}", ["'x-h3'"]),
    ],
)
def test_headers_a_server_would_refuse_fail_at_the_option(text, words):
    """A name given twice in the same case (json.loads kept the last), NaN, a 1 MB value or
    10,000 headers: found at the option, not as a server that 'cannot be reached' (it closes
    the connection on a head that long)."""
    with pytest.raises(OptionError) as caught:
        request_headers("requestHeaders", text)
    message = str(caught.value)
    assert "Option 'requestHeaders'" in message and all(w in message for w in words), message
    assert "vvvv" not in message and "aaaa" not in message  # a value is never shown
