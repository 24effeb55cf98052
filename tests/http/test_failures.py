"""The ``_error`` of a failed request: the server's words, never a credential, cut after masking."""

import base64
import json

import httpx

from dspark_json.http.failures import MESSAGE_CHARS, http_error, no_endpoint_error, transport_error
from dspark_json.http.secrets import Secret, redact

KEY = "zq-canary-7f3a9c-0123456789"
USERINFO = "ann:pa55-w0rd-canary"


def test_a_key_echoed_at_the_cut_is_masked_before_the_cut():
    # The key straddles character 500: cutting first would leave its start in the message.
    message = "x" * (MESSAGE_CHARS - 5) + f" {KEY} and more"
    body = json.dumps({"error": {"message": message, "type": "BadRequestError"}}).encode()
    error = http_error(400, body, 1, [Secret(KEY)])
    assert KEY[:5] not in error["message"] and len(error["message"]) <= MESSAGE_CHARS
    assert error["message"].endswith(" *** ")


def test_a_transport_error_long_text_is_masked_before_the_cut():
    exc = httpx.ConnectError("y" * (MESSAGE_CHARS - 3) + KEY)
    error = transport_error(exc, 2, 5.0, [Secret(KEY)])
    assert KEY[:3] not in error["message"] and error["type"] == "ConnectError"
    assert error["attempts"] == 2 and error["status"] is None


def test_basic_auth_echoed_as_base64_is_masked():
    token = base64.b64encode(USERINFO.encode()).decode()
    body = json.dumps({"message": f"bad header Authorization: Basic {token}"}).encode()
    error = http_error(401, body, 1, [Secret(USERINFO)])
    assert token not in error["message"] and "Basic ***" in error["message"]


def test_url_credentials_and_percent_encoded_keys_are_masked():
    text = f"GET http://{USERINFO}@h:1/v1 with key {KEY.replace('-', '%2D')} ok"
    shown = redact(text, [Secret("zq canary/7")])  # an unrelated secret: URL rule alone
    assert USERINFO not in shown and "http://***@h:1" in shown
    encoded = "zq%20canary%2F7"
    assert encoded not in redact(f"echo {encoded}", [Secret("zq canary/7")])


def test_the_server_error_type_cannot_smuggle_the_key():
    body = json.dumps({"error": {"message": "no", "type": f"Bad {KEY}"}}).encode()
    error = http_error(400, body, 1, [Secret(KEY)])
    assert KEY not in json.dumps(error)


def test_no_endpoint_error_names_the_last_error_and_masks():
    last = http_error(503, json.dumps({"message": f"down {KEY}"}).encode(), 3, [Secret(KEY)])
    error = no_endpoint_error(["http://a:1"], 9.0, last, 3, [Secret(KEY)])
    assert error["type"] == "endpoint_unavailable" and error["status"] == 503
    assert "requestDeadline=9s" in error["message"] and KEY not in error["message"]
