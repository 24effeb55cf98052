"""Hard limits on what a server sends back: a body over maxResponseBytes (as received, or once a
gzip bomb is decompressed) and a body that is not UTF-8 are rows that say so, never a crash, a
full memory or U+FFFD in silence. Real servers on 127.0.0.1 answering raw bytes."""

from __future__ import annotations

import gzip
import json
import time
import zlib

import httpx
import pyarrow as pa
import pytest

from dspark_json.errors import RecordError
from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions
from dspark_json.http.transport import MAX_HEADER_LINES
from dspark_json.inputs.listing import PromptPartition, Segment
from dspark_json.load import prepare, resolve_schema
from dspark_json.options import Options
from dspark_json.pipeline import read_partition
from dspark_json.rows import MALFORMED, STATUSES
from tests.raw_servers import Request, alive, completion, raw_server, response

LIMIT = 1 << 20  # the maxResponseBytes of these tests
OK = json.dumps(completion('{"score": 1}')).encode()


def head(status: int = 200, **fields: str) -> bytes:
    lines = [f"HTTP/1.1 {status} X", "content-type: application/json", "connection: close"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in fields.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def bomb(size: int) -> bytes:
    """A gzip stream of ``size`` bytes of JSON-looking text, about a thousandth of that."""
    return gzip.compress(b'{"a": "' + b"0" * size + b'"}', 9)


def serving(answer: bytes) -> tuple[list[Request], object]:
    posts: list[Request] = []

    def handler(request: Request) -> bytes | None:
        if request.method == "POST":
            posts.append(request)
            return answer
        return alive(request)

    return posts, handler


def fetch_one(answer: bytes, transport: httpx.AsyncBaseTransport | None = None):
    posts, handler = serving(answer)
    with raw_server(handler) as server:  # type: ignore[arg-type]
        config = HttpOptions(endpoints=(Endpoint(server.url),), max_response_bytes=LIMIT)
        fetched = complete_all([{"prompt": "p"}], config, transport=transport)
    return fetched.outcomes[0], posts


@pytest.mark.parametrize("transport", ["ours", "httpx"])
def test_a_gzip_bomb_stops_at_the_limit_once_decompressed_and_is_not_retried(transport):
    compressed = bomb(200 * LIMIT)  # 200 MiB once decompressed
    assert len(compressed) < LIMIT
    answer = head(content_encoding="gzip", content_length=str(len(compressed))) + compressed
    injected = httpx.AsyncHTTPTransport() if transport == "httpx" else None
    outcome, posts = fetch_one(answer, injected)
    assert outcome.body is None
    assert outcome.error is not None
    assert outcome.error["type"] == "response_too_large"
    assert outcome.error["status"] == 200
    assert outcome.error["attempts"] == 1
    assert f"larger than {LIMIT} bytes once decompressed" in outcome.error["message"]
    assert "maxResponseBytes" in outcome.error["message"]
    assert len(posts) == 1  # the same request would get the same answer: not sent again


@pytest.mark.parametrize("framing", ["content-length", "chunked", "close"])
def test_a_body_over_the_limit_as_received_is_refused_whatever_its_framing(framing):
    body = b'{"a": "' + b"x" * (LIMIT + 10) + b'"}'
    if framing == "content-length":
        answer = head(content_length=str(len(body))) + body
    elif framing == "chunked":
        pieces = [body[i : i + 65536] for i in range(0, len(body), 65536)]
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
        answer = head(transfer_encoding="chunked") + chunks + b"0\r\n\r\n"
    else:
        answer = head() + body  # delimited by the server closing
    outcome, posts = fetch_one(answer)
    assert outcome.error is not None
    assert outcome.error["type"] == "response_too_large"
    assert f"larger than {LIMIT} bytes as received" in outcome.error["message"]
    assert len(posts) == 1


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_body_within_the_limit_is_decoded(encoding):
    packed = gzip.compress(OK) if encoding == "gzip" else zlib.compress(OK)
    outcome, _ = fetch_one(
        head(content_encoding=encoding, content_length=str(len(packed))) + packed
    )
    assert outcome.error is None
    assert outcome.body == OK.decode()


@pytest.mark.parametrize(
    ("encoding", "data", "why"),
    [
        ("gzip", b"not gzip at all", "not valid gzip data"),
        ("gzip", gzip.compress(OK)[:-8], "its trailer is missing"),
        ("gzip", gzip.compress(OK)[:-4], "its trailer is missing"),
        (
            "gzip",
            gzip.compress(OK)[:-8] + b"\0\0\0\0" + gzip.compress(OK)[-4:],
            "incorrect data check",
        ),
        ("gzip", gzip.compress(OK)[:-4] + b"\1\0\0\0", "incorrect length check"),
        ("deflate", zlib.compress(OK)[:-4], "its trailer is missing"),
        ("br", b"\x0b\x02\x80{}\x03", "Content-Encoding 'br', which is not decoded here"),
    ],
)
def test_a_body_that_cannot_be_decoded_is_a_row_error(encoding, data, why):
    outcome, posts = fetch_one(
        head(content_encoding=encoding, content_length=str(len(data))) + data
    )
    assert outcome.error is not None
    assert outcome.error["type"] == "DecodingError"
    assert why in outcome.error["message"]
    assert len(posts) == 1


def test_invalid_utf8_keeps_the_bytes_and_says_where():
    body = OK.replace(b'{\\"score\\": 1}', b"caf\xe9 \xff")
    outcome, _ = fetch_one(response(200, body))
    assert outcome.error is not None
    assert outcome.error["type"] == "invalid_utf8"
    first_bad = body.index(b"\xe9")
    assert f"at byte {first_bad}" in outcome.error["message"]
    assert outcome.body == body.decode("utf-8", "backslashreplace")
    assert "caf\\xe9 \\xff" in outcome.body
    assert "\ufffd" not in outcome.body


def test_the_status_is_part_of_the_row_contract():
    assert "invalid_utf8" in STATUSES
    assert "invalid_utf8" in MALFORMED


def _read(tmp_path, handler, mode: str = "PERMISSIVE") -> pa.Table:
    (tmp_path / "a.jsonl").write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in ("bad", "fine"))
    )
    with raw_server(handler) as server:
        options = {
            "endpoint": server.url,
            "prompts": str(tmp_path),
            "model": "m",
            "mode": mode,
            "responseFormat": json.dumps(
                {"type": "object", "properties": {"score": {"type": "integer"}}}
            ),
        }
        query = prepare(Options.parse(options))
        partition = PromptPartition(0, (Segment(str(tmp_path / "a.jsonl"), 0, 2),))
        batches = list(read_partition(partition, query, resolve_schema(query, [])))
    return pa.Table.from_batches(batches)


def utf8_answers(request: Request) -> bytes | None:
    if request.method != "POST":
        return alive(request)
    if b'"bad"' in request.raw:
        return response(200, OK.replace(b"score", b"sc\xf0\x28ore"))
    return response(200, OK)


def test_an_invalid_utf8_answer_is_a_row_with_its_status_and_its_bytes(tmp_path):
    table = _read(tmp_path, utf8_answers)
    assert table.column("_status").to_pylist() == ["invalid_utf8", "ok"]
    corrupt = table.column("_corrupt_record").to_pylist()
    assert corrupt[0] is not None and "sc\\xf0(ore" in corrupt[0]
    assert corrupt[1] is None
    error = table.column("_error").to_pylist()[0]
    assert error["type"] == "invalid_utf8" and error["status"] == 200
    assert table.column("parsed").to_pylist()[1] == {"score": 1}


def test_dropmalformed_drops_and_failfast_stops_at_an_invalid_utf8_answer(tmp_path):
    dropped = _read(tmp_path, utf8_answers, "DROPMALFORMED")
    assert dropped.column("_status").to_pylist() == ["ok"]
    with pytest.raises(RecordError, match=r"is malformed \(invalid_utf8"):
        _read(tmp_path, utf8_answers, "FAILFAST")


@pytest.mark.parametrize("interim", [False, True])
def test_a_header_flood_is_a_row_error_read_no_further(interim):
    """A server that answers with endless header lines (or endless 1xx interim answers): the
    head is read up to MAX_HEADER_LINES / MAX_HEAD_BYTES, then the row says so; not retried."""
    final = head(content_length=str(len(OK)))
    if interim:
        answer = b"HTTP/1.1 100 Continue\r\n\r\n" * 200_000 + final
    else:
        answer = final[:-2] + b"x-h: v\r\n" * 200_000 + b"\r\n"
    started = time.monotonic()
    outcome, posts = fetch_one(answer + OK)
    assert time.monotonic() - started < 10
    assert outcome.body is None
    assert outcome.error is not None
    assert outcome.error["type"] == "headers_too_large"
    assert f"more than {MAX_HEADER_LINES} header lines" in outcome.error["message"]
    assert len(posts) == 1


def test_a_head_within_the_bounds_is_read():
    extra = b"x-h: v\r\n" * (MAX_HEADER_LINES - 3)  # with content-type, connection, length
    answer = head(content_length=str(len(OK)))
    answer = answer[:-2] + extra + b"\r\n" + OK
    outcome, _ = fetch_one(answer)
    assert outcome.error is None
    assert outcome.body == OK.decode()
