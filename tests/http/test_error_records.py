"""The ``_error`` record of each kind of failure: which type, which message, how many attempts."""

import json

import httpx

from dspark_json.http.failures import http_error, no_endpoint_error, transport_error


def test_a_body_that_is_not_utf8_still_gives_a_record():
    error = http_error(502, b"bad gateway \xff\xfe", 2)
    assert error == {
        "status": 502,
        "type": "http_502",
        "message": "bad gateway \ufffd\ufffd",
        "attempts": 2,
    }


def test_a_gateway_error_given_as_a_plain_string():
    body = json.dumps({"error": "upstream timed out"}).encode()
    assert http_error(504, body, 3) == {
        "status": 504,
        "type": "http_504",
        "message": "upstream timed out",
        "attempts": 3,
    }


def test_each_timeout_says_which_limit_it_hit():
    connect = transport_error(httpx.ConnectTimeout("timed out"), 2, 30.0)
    assert connect == {
        "status": None,
        "type": "connect_timeout",
        "message": "no connection within connectTimeout (timed out)",
        "attempts": 2,
    }
    for exc in (httpx.ReadTimeout("timed out"), httpx.PoolTimeout(""), TimeoutError()):
        read = transport_error(exc, 3, 2.5)
        assert read == {
            "status": None,
            "type": "timeout",
            "message": "no complete response within requestTimeout=2.5s / readTimeout",
            "attempts": 3,
        }


def test_a_transport_error_keeps_its_reason_and_drops_every_url():
    exc = httpx.ConnectError("All connection attempts failed for url 'http://h:1/v1'")
    assert transport_error(exc, 1, 5.0)["message"] == "All connection attempts failed"
    twice = httpx.ProxyError("Proxy refused for url http://proxy:3128 for url http://h:1/v1")
    assert transport_error(twice, 1, 5.0)["message"] == "Proxy refused"
    silent = transport_error(httpx.ReadError(""), 4, 5.0)
    assert silent == {"status": None, "type": "ReadError", "message": "ReadError", "attempts": 4}


def test_no_endpoint_error_without_an_earlier_error():
    error = no_endpoint_error(["http://a:1", "http://b:2"], 2.5, None, 0)
    assert error == {
        "status": None,
        "type": "endpoint_unavailable",
        "message": "no endpoint (http://a:1, http://b:2) was healthy within requestDeadline=2.5s",
        "attempts": 0,
    }


def test_no_endpoint_error_quotes_the_last_error():
    last = transport_error(httpx.ConnectError("refused"), 2, 5.0)
    error = no_endpoint_error(["http://a:1"], 9.0, last, 2)
    assert error["message"] == (
        "no endpoint (http://a:1) was healthy within requestDeadline=9s; "
        "last error: ConnectError: refused"
    )
    assert (error["status"], error["attempts"]) == (None, 2)
