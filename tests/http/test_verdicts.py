"""What an answer means (http.verdicts): the one table the send loop obeys, and the shed
signals of llm-d and of a gateway scaled to zero: retried until requestDeadline, not against
maxAttempts, counted as shed, never resting the endpoint."""

import httpx
import pytest

from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.verdicts import DROPPED_REASON, RULES, Next, judge

ENDPOINT = (Endpoint("http://gateway.test"),)


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr("dspark_json.http.client.backoff", lambda attempt: 0.0)
    monkeypatch.setattr("dspark_json.http.endpoints._PROBE_FIRST_S", 0.01)
    monkeypatch.delenv("HTTP_PROXY", raising=False)


@pytest.mark.parametrize(
    ("status", "headers", "body", "expected"),
    [
        (200, {}, b"{}", Next.ANSWER),
        (429, {DROPPED_REASON: "sheddable"}, b"", Next.LATER),
        (503, {}, b"no healthy upstream", Next.LATER),
        (429, {}, b'{"error": {"code": "insufficient_quota"}}', Next.RETRY),
        (503, {"retry-after": "1"}, b"", Next.LATER),
        (429, {}, b"", Next.LATER),
        (503, {}, b"", Next.RETRY),
        (500, {}, b"", Next.RETRY),
        (404, {}, b"The model `x` does not exist.", Next.REROUTE),
        (400, {}, b"bad", Next.FAIL),
    ],
)
def test_each_kind_of_answer_has_one_verdict(status, headers, body, expected):
    assert judge(status, httpx.Headers(headers), body).next is expected


def test_only_shed_signals_count_as_shed_and_none_of_them_rests():
    shed = [r for r in RULES if r.verdict.shed]
    assert [r.name for r in shed] == ["shed", "no_backend"]
    assert not any(r.verdict.rest for r in shed)


def _shed_then_ok(times: int, status: int, headers: dict[str, str], body: bytes):
    answers = iter([httpx.Response(status, headers=headers, content=body)] * times)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": []})
        return next(answers, httpx.Response(200, json={"ok": True}))

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(
    ("status", "headers", "body"),
    [
        (429, {DROPPED_REASON: "sheddable request dropped under load"}, b"{}"),
        (503, {}, b"no healthy upstream"),
    ],
)
def test_shed_requests_are_retried_past_max_attempts_counted_and_never_rest(status, headers, body):
    config = HttpOptions(endpoints=ENDPOINT, max_attempts=2, request_deadline=30)
    fetched = complete_all(
        [{"model": "m"}], config, transport=_shed_then_ok(6, status, headers, body)
    )
    assert fetched.outcomes[0].error is None
    assert fetched.stats.shed == 6
    assert fetched.stats.requests == 7
    assert fetched.stats.endpoint_rests == 0


def test_a_shed_without_end_stops_at_request_deadline():
    config = HttpOptions(endpoints=ENDPOINT, max_attempts=2, request_deadline=0.3)
    fetched = complete_all(
        [{"model": "m"}], config, transport=_shed_then_ok(10**6, 503, {}, b"no healthy upstream")
    )
    error = fetched.outcomes[0].error
    assert error is not None and error["status"] == 503
    assert fetched.stats.shed > 2 and fetched.stats.endpoint_rests == 0
