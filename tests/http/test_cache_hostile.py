"""The response cache against a hostile server and a hostile cache directory (issue 45): a
failure is never pinned, an entry that breaks the read limits is asked again with a WARN naming
it, a failed write leaves nothing behind, and what the key holds."""

from __future__ import annotations

import json

import pytest

from dspark_json.http.cache import ENTRY_SUFFIX, ResponseCache
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.reuse import ReuseOptions, send_once
from tests.raw_servers import completion, raw_server, response

HTML = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def body(prompt: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}]}).encode()


def run(url: str, cache: str, requests: list[bytes]):
    http = HttpOptions(endpoints=(Endpoint(url),), max_concurrency=2, max_attempts=1)
    return send_once(requests, [True] * len(requests), http, ReuseOptions(cache=cache), model="m")


@pytest.mark.parametrize(
    "bad",
    [
        HTML,  # a gateway's error page, with status 200
        b"",  # nothing
        json.dumps(completion("x")).encode()[:40],  # cut short
        b"[1, 2, 3]",  # JSON, not an envelope
        b"[" * 5000 + b"]" * 5000,  # nested past rows.MAX_NESTING
    ],
    ids=["html", "empty-body", "cut-short", "not-an-envelope", "too-deep"],
)
def test_a_200_that_is_not_a_completion_is_never_cached(tmp_path, bad):
    answers = iter([response(200, bad), response(200, completion('{"a": 1}'))])
    with raw_server(lambda request: next(answers)) as server:
        first = run(server.url, str(tmp_path), [body("a")])
        assert first.outcomes[0].body is not None  # the row has it (corrupt_envelope)
        assert not list(tmp_path.rglob(f"*{ENTRY_SUFFIX}"))
        second = run(server.url, str(tmp_path), [body("a")])
        posts = [r for r in server.requests if r.method == "POST"]
    assert len(posts) == 2  # the healthy server was asked again
    assert second.stats.cache_hits == 0
    assert json.loads(second.outcomes[0].body or "")["choices"]
    assert len(list(tmp_path.rglob(f"*{ENTRY_SUFFIX}"))) == 1  # the good answer is kept


def test_the_models_own_answer_is_cached_whatever_its_content(tmp_path):
    """Prose, cut content (finish_reason length) and no choices are the model's answer (ok,
    not_json, truncated, empty rows), not a server failure: kept."""
    cache = ResponseCache(str(tmp_path), "m")
    prose = json.dumps(completion("no JSON here"))
    assert cache.put(body("a"), prose) and cache.get(body("a")) == prose
    empty = json.dumps({"id": "c", "choices": []})
    assert cache.put(body("b"), empty) and cache.get(body("b")) == empty
