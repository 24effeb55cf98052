import httpx
import pytest

from dspark_json import client
from dspark_json.client import ClientConfig, complete_all

CONFIG = ClientConfig(
    endpoint="http://model.test", max_concurrency=4, request_timeout=2, max_attempts=3
)


@pytest.fixture(autouse=True)
def no_sleeping_backoff(monkeypatch):
    monkeypatch.setattr(client, "_backoff", lambda attempt: 0.0)


def run(handler, n=1, config=CONFIG):
    return complete_all(
        [{"i": i} for i in range(n)], config, transport=httpx.MockTransport(handler)
    )


def test_success_returns_the_body():
    (out,) = run(lambda r: httpx.Response(200, text='{"ok": true}'))
    assert out.body == '{"ok": true}' and out.error is None


def test_retries_5xx_then_succeeds():
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(503 if len(calls) < 3 else 200, text="{}")

    (out,) = run(handler)
    assert out.body == "{}" and len(calls) == 3


def test_gives_up_after_max_attempts_with_the_server_message():
    def handler(request):
        return httpx.Response(500, json={"error": {"message": "boom", "type": "InternalError"}})

    (out,) = run(handler)
    assert out.body is None
    assert out.error == {"status": 500, "type": "InternalError", "message": "boom", "attempts": 3}


@pytest.mark.parametrize(
    "payload",
    [
        {"error": {"message": "bad model", "type": "NotFoundError", "param": "model", "code": 404}},
        {
            "object": "error",
            "message": "bad model",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        },
    ],
    ids=["nested-shape", "flat-shape"],
)
def test_4xx_is_not_retried_and_both_error_shapes_are_read(payload):
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(404, json=payload)

    (out,) = run(handler)
    assert len(calls) == 1
    assert out.error == {
        "status": 404,
        "type": "NotFoundError",
        "message": "bad model",
        "attempts": 1,
    }


def test_retry_after_header_is_honoured(monkeypatch):
    waits = []
    real_sleep = client.asyncio.sleep

    async def fake_sleep(seconds):
        waits.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(client.asyncio, "sleep", fake_sleep)
    answers = iter(
        [
            httpx.Response(429, headers={"Retry-After": "1.5"}),
            httpx.Response(429, headers={"retry-after-ms": "250"}),
            httpx.Response(200, text="{}"),
        ]
    )
    (out,) = run(lambda r: next(answers))
    assert out.body == "{}"
    assert waits == [1.5, 0.25]


def test_connection_errors_are_retried_and_reported_without_the_url():
    def handler(request):
        raise httpx.ConnectError("connection refused", request=request)

    (out,) = run(handler)
    assert out.error["type"] == "ConnectError" and out.error["attempts"] == 3
    assert "model.test" not in out.error["message"]


def test_outcomes_keep_request_order_and_skip_none():
    def handler(request):
        return httpx.Response(200, text=request.content.decode())

    outs = complete_all([{"i": 0}, None, {"i": 2}], CONFIG, transport=httpx.MockTransport(handler))
    assert [o.body for o in outs] == ['{"i": 0}', None, '{"i": 2}']
