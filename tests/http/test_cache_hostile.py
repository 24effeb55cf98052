"""The response cache against a hostile server and a hostile cache directory (issue 45): a
failure is never pinned, an entry that breaks the read limits is asked again with a WARN naming
it, a failed write leaves nothing behind, and what the key holds."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys

import pytest

from dspark_json import OptionError
from dspark_json.http.cache import ENTRY_SUFFIX, ResponseCache
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.reuse import ReuseOptions, send_once
from dspark_json.options import Options
from tests.http.conftest import request_body
from tests.raw_servers import completion, raw_server, response

HTML = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


pytestmark = pytest.mark.usefixtures("no_proxy")  # tests/http/conftest.py

body = request_body


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


def cached(tmp_path, model: str = "m", **limits) -> tuple[ResponseCache, str]:
    """A cache in ``tmp_path`` holding one answer to ``body("a")``; and the answer."""
    cache = ResponseCache(str(tmp_path), model, **limits)
    answer = json.dumps(completion('{"a": 1}'))
    assert cache.put(body("a"), answer) and cache.get(body("a")) == answer
    return cache, answer


def entry_of(tmp_path):
    (entry,) = tmp_path.rglob(f"*{ENTRY_SUFFIX}")
    return entry


def header_and_body(data: bytes) -> tuple[dict, bytes]:
    head, _, raw = data[len(b"dspark-json-cache 1 ") :].partition(b"\n")
    return json.loads(head), raw


def rewrite(entry, header: dict | bytes, raw: bytes) -> None:
    line = header if isinstance(header, bytes) else json.dumps(header).encode()
    entry.write_bytes(b"dspark-json-cache 1 " + line + b"\n" + raw)


def asked_again(cache: ResponseCache, caplog, entry, why: str) -> None:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        assert cache.get(body("a")) is None
    assert why in caplog.text and entry.name in caplog.text and "asked again" in caplog.text


def test_an_entry_over_max_response_bytes_is_not_read(tmp_path, caplog):
    _, answer = cached(tmp_path)
    small = ResponseCache(str(tmp_path), "m", max_bytes=len(answer) // 2)
    entry = entry_of(tmp_path)
    entry.write_bytes(entry.read_bytes() + b" " * 70_000)  # past the header's room, too
    asked_again(small, caplog, entry, "over maxResponseBytes")


def test_an_entry_whose_header_is_nested_too_deep_is_asked_again(tmp_path, caplog):
    cache, answer = cached(tmp_path)
    entry = entry_of(tmp_path)
    rewrite(entry, b"[" * 100_000 + b"]" * 100_000, answer.encode())  # RecursionError before
    asked_again(cache, caplog, entry, "nested more than")


def test_an_entry_that_is_not_utf8_is_asked_again(tmp_path, caplog):
    cache, _ = cached(tmp_path)
    entry = entry_of(tmp_path)
    header, raw = header_and_body(entry.read_bytes())
    raw = raw[:-2] + b"\xff}"
    header.update(bytes=len(raw), sha256=hashlib.sha256(raw).hexdigest())
    rewrite(entry, header, raw)
    asked_again(cache, caplog, entry, "not UTF-8")


def test_an_entry_kept_for_another_model_is_asked_again(tmp_path, caplog):
    cache, _ = cached(tmp_path)
    entry = entry_of(tmp_path)
    header, raw = header_and_body(entry.read_bytes())
    rewrite(entry, {**header, "model": "other"}, raw)
    asked_again(cache, caplog, entry, "kept for model 'other'")


@pytest.mark.timeout(20)
def test_a_fifo_where_an_entry_should_be_is_never_opened(tmp_path, caplog):
    cache, _ = cached(tmp_path)
    entry = entry_of(tmp_path)
    entry.unlink()
    os.mkfifo(entry)  # opening it for reading blocks until a writer comes: never
    asked_again(cache, caplog, entry, "not a regular file")


def test_the_warning_names_the_entry_without_credentials(caplog):
    cache = ResponseCache("mock://user:canary-secret@bucket/cache", "m")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        cache._unusable(f"{cache.directory}/ab", "ab.answer", "why")
    assert "ab.answer" in caplog.text and "canary-secret" not in caplog.text


def test_a_refused_rename_leaves_no_temporary_file(tmp_path, caplog):
    cache = ResponseCache(str(tmp_path), "m")
    folder, name = cache.where(cache.key(body("a")))
    (tmp_path / folder.rsplit("/", 1)[1] / name).mkdir(parents=True)  # the rename fails
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        assert not cache.put(body("a"), json.dumps(completion("x")))
    assert "could not be written" in caplog.text
    assert not list(tmp_path.rglob("*.tmp"))


_FULL_DISK = """
import json, resource, signal, sys
from dspark_json.http.cache import ResponseCache
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit is EFBIG, an OSError
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # a disk that fills up midway
cache = ResponseCache(sys.argv[1], "m")
body = json.dumps({"choices": [{"message": {"content": "x" * 100_000}}]})
print(cache.put(b"request", body))
"""


def test_a_disk_that_fills_up_midway_leaves_no_temporary_file(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False" and "could not be written" in done.stderr
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob(f"*{ENTRY_SUFFIX}"))


def test_an_object_store_cache_url_with_query_parameters_is_refused_at_load():
    with pytest.raises(OptionError) as caught:
        Options.parse(
            {
                "endpoint": "http://127.0.0.1:1",
                "path": "/p",
                "cache": "s3://bucket/cache?endpoint_override=h:9000&secret_key=canary-secret",
            }
        )
    text = str(caught.value)
    assert "Option 'cache' is a URI with a query string" in text
    assert "storageOptions" in text and "aws_endpoint_url" in text
    assert "canary-secret" not in text and "s3://bucket/cache?" in text


def test_a_cache_url_without_query_parameters_is_accepted():
    assert Options.parse({"endpoint": "http://h:1", "path": "/p", "cache": "s3://bucket/c"})


def test_the_key_is_model_and_body_not_the_endpoint(tmp_path):
    """Replicas of one model share answers: the second server is not asked. A separate
    ``cache`` directory per server keeps two servers apart (docs/guide/dedupe-and-cache.md)."""
    answer = response(200, completion('{"a": 1}'))
    with raw_server(lambda r: answer) as one, raw_server(lambda r: answer) as two:
        run(one.url, str(tmp_path), [body("a")])
        again = run(two.url, str(tmp_path), [body("a")])
        apart = run(two.url, str(tmp_path / "two"), [body("a")])
        asked = [sum(r.method == "POST" for r in s.requests) for s in (one, two)]
    assert asked == [1, 1]  # the second server only for its own directory
    assert again.stats.cache_hits == 1 and apart.stats.cache_hits == 0
    assert len(list(tmp_path.glob(f"*/*{ENTRY_SUFFIX}"))) == 1
