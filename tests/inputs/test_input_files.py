"""Input files as they come: with byte-order marks, compressed, in Parquet, lying about their
content, deleted or changed under a running stream, or holding bytes that are not UTF-8."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import os
import shutil
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dspark_json.errors import DSparkJsonError, OptionError
from dspark_json.inputs.listing import Position, PromptListing, Segment, read_rows
from dspark_json.inputs.prompts import read_segment
from dspark_json.options import Options
from dspark_json.storage import ENVIRONMENT_ONLY


def line(i: int, **extra: object) -> bytes:
    return (json.dumps({"custom_id": f"c{i}", "prompt": f"p{i}", **extra}) + "\n").encode()


def lines(*numbers: int) -> bytes:
    return b"".join(line(i) for i in numbers)


def read_all(directory: Path) -> list:
    listing = PromptListing(str(directory))
    return [r for s in listing.segments(Position(), listing.end()) for r in read_segment(s)]


def test_a_utf8_bom_does_not_make_the_first_prompt_invalid(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + lines(0, 1))
    (tmp_path / "b.jsonl").write_bytes(lines(2) + b"\xef\xbb\xbf" + lines(3))  # concatenated
    records = read_all(tmp_path)
    assert [(r.custom_id, r.problem) for r in records] == [(f"c{i}", None) for i in range(4)]


def test_utf16_and_utf32_files_with_a_bom_are_read(tmp_path):
    text = lines(0, 1).decode()
    (tmp_path / "a.jsonl").write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    (tmp_path / "b.jsonl").write_bytes(b"\xfe\xff" + text.encode("utf-16-be"))
    (tmp_path / "c.jsonl").write_bytes(b"\xff\xfe\x00\x00" + text.encode("utf-32-le"))
    assert [r.custom_id for r in read_all(tmp_path) if r.problem is None] == ["c0", "c1"] * 3


def write_forms(directory: Path) -> None:
    directory.mkdir(exist_ok=True)
    (directory / "a.jsonl.gz").write_bytes(gzip.compress(lines(0)) + gzip.compress(lines(1)))
    (directory / "b.ndjson.zst").write_bytes(pa.compress(lines(2, 3), "zstd", asbytes=True))
    (directory / "c.json.bz2").write_bytes(bz2.compress(lines(4)))
    table = pa.table(
        {
            "custom_id": ["c5", "c6", "c7"],
            "prompt": ["p5", None, "p7"],
            "messages": [None, [{"role": "user", "content": "p6"}], None],
            "n": [1, 2, None],
        }
    )
    pq.write_table(table, directory / "d.parquet", row_group_size=2)


def test_compressed_json_lines_and_parquet_are_read_with_file_and_row_offsets(tmp_path):
    write_forms(tmp_path)
    listing = PromptListing(str(tmp_path))
    assert [(e.name, n) for e, n in listing.files()] == [
        ("a.jsonl.gz", 2),
        ("b.ndjson.zst", 2),
        ("c.json.bz2", 1),
        ("d.parquet", 3),
    ]
    records = read_all(tmp_path)
    assert [(r.custom_id, r.problem) for r in records] == [(f"c{i}", None) for i in range(8)]
    assert [r.messages[0]["content"] for r in records] == [f"p{i}" for i in range(8)]
    assert records[7].where.endswith("d.parquet row 3") and records[5].fields["n"] == 1
    # A segment in the middle of a Parquet file reads only its rows (second row group).
    (row,) = read_segment(Segment(str(tmp_path / "d.parquet"), 2, 3))
    assert row.custom_id == "c7" and row.where.endswith("d.parquet row 3")


def test_the_content_not_the_name_says_whether_a_file_is_compressed(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(gzip.compress(lines(0)))  # gzip named .jsonl
    (tmp_path / "b.jsonl.gz").write_bytes(lines(1))  # plain text named .gz
    assert [(r.custom_id, r.problem) for r in read_all(tmp_path)] == [("c0", None), ("c1", None)]


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        ("a.jsonl.gz", gzip.compress(lines(0, 1, 2))[:-12], "cannot be decompressed"),
        ("a.jsonl.zst", pa.compress(lines(0, 1), "zstd", asbytes=True)[:-4], "cannot be"),
        ("a.parquet", lines(0), "is not a Parquet file"),
        ("a.jsonl", b"\xff\xfe" + b"{\x00\x00\xd8", "byte-order mark but is not"),
    ],
    ids=["truncated-gzip", "truncated-zstd", "parquet-that-is-not", "bad-utf16"],
)
def test_a_file_that_lies_about_its_content_fails_with_its_name(tmp_path, name, data, said):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(DSparkJsonError) as caught:
        PromptListing(str(tmp_path)).end()
    assert str(tmp_path / name) in str(caught.value) and said in str(caught.value)


def test_invalid_utf8_lone_surrogates_and_huge_integers_are_invalid_prompt_rows(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(
        b'{"custom_id": "bad-utf8", "prompt": "caf\xe9"}\n'
        b'{"custom_id": "lone", "prompt": "\\ud800 alone"}\n'
        b'{"custom_id": "pair", "prompt": "\\ud83d\\ude00"}\n'
        b'{"custom_id": "big", "prompt": "x", "n": ' + b"9" * 5000 + b"}\n"
    )
    records = read_all(tmp_path)
    problems = [r.problem for r in records]
    assert problems[0] == "not valid UTF-8 (byte 0xe9 at byte 41)"
    assert records[0].raw.endswith('caf\ufffd"}')  # shown in _corrupt_record, not sent
    assert "lone surrogate" in problems[1]
    assert problems[2] is None and records[2].messages[0]["content"] == "\U0001f600"
    assert "4300 digits" in problems[3]


def test_a_missing_or_wrong_prompts_directory_is_an_error_naming_it(tmp_path):
    with pytest.raises(OptionError) as caught:
        PromptListing(str(tmp_path / "nope"), option="prompts").files()
    assert f"Option 'prompts' names {tmp_path / 'nope'}, which does not exist" in str(caught.value)
    with pytest.raises(OptionError, match="Option 'prompts' / 'responses' names"):
        PromptListing(str(tmp_path / "nope")).files()  # as the stream reader builds it
    (tmp_path / "a.jsonl").write_bytes(lines(0))
    with pytest.raises(OptionError, match=r"Option 'responses' names .* which is a file"):
        PromptListing(str(tmp_path / "a.jsonl"), option="responses").files()


def test_a_directory_deleted_mid_stream_fails_with_its_path(tmp_path):
    directory = tmp_path / "prompts"
    directory.mkdir()
    (directory / "a.jsonl").write_bytes(lines(0))
    (directory / "b.jsonl").write_bytes(lines(1))
    listing = PromptListing(str(directory), option="prompts")
    first = listing.advance(Position(), max_files=1)
    shutil.rmtree(directory)
    with pytest.raises(DSparkJsonError) as caught:
        listing.advance(first)
    assert f"The input directory {directory} (option 'prompts') disappeared" in str(caught.value)


def test_an_unread_file_deleted_mid_stream_fails_and_a_read_one_may_go(tmp_path):
    for i, name in enumerate(("a.jsonl", "b.jsonl", "c.jsonl")):
        (tmp_path / name).write_bytes(lines(2 * i, 2 * i + 1))
    listing = PromptListing(str(tmp_path))
    cap = listing.end()  # as availableNow does
    first = listing.advance(Position(), max_files=1, cap=cap)
    assert first == Position("a.jsonl", 2)
    (tmp_path / "a0.jsonl").write_bytes(b"\n")  # no rows: may go at any time
    listing.files()
    os.remove(tmp_path / "a0.jsonl")
    os.remove(tmp_path / "a.jsonl")  # read to its end: cleaning up is fine
    second = listing.advance(first, max_rows=1, cap=cap)
    assert second == Position("b.jsonl", 1)
    os.remove(tmp_path / "b.jsonl")  # one row of it not read yet
    with pytest.raises(DSparkJsonError) as caught:
        listing.advance(second, cap=cap)
    assert f"{tmp_path / 'b.jsonl'} disappeared before the query read its row 2" in str(
        caught.value
    )


def test_a_replayed_batch_whose_file_is_gone_fails_instead_of_running_empty(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(lines(0, 1))
    os.remove(tmp_path / "a.jsonl")
    restarted = PromptListing(str(tmp_path))  # a new driver, offsets from the checkpoint
    with pytest.raises(DSparkJsonError, match=r"a\.jsonl is gone"):
        restarted.segments(Position(), Position("a.jsonl", 2))


def test_a_file_that_shrinks_or_vanishes_before_a_task_reads_it_fails_the_task(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(lines(0, 1, 2))
    (segment,) = PromptListing(str(tmp_path)).segments(Position(), Position("a.jsonl", 3))
    path.write_bytes(lines(0))
    with pytest.raises(DSparkJsonError, match="holds 1 rows now, but 3 or more were counted"):
        read_rows(segment)
    path.unlink()
    with pytest.raises(DSparkJsonError, match=rf"{path} is gone: its rows 1-3"):
        read_rows(segment)


def test_a_file_that_grows_after_it_was_counted_is_reported(tmp_path, caplog):
    path = tmp_path / "a.jsonl"
    path.write_bytes(lines(0))
    listing = PromptListing(str(tmp_path))
    listing.files()
    path.write_bytes(lines(0, 1))
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        assert [n for _, n in listing.files()] == [1]
    assert f"Input file {path} changed size after it was counted" in caplog.text


def test_a_fifo_named_like_a_prompt_file_is_not_read(tmp_path, caplog):
    os.mkfifo(tmp_path / "pipe.jsonl")
    (tmp_path / "a.jsonl").write_bytes(lines(0))
    done: list[list] = []
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        worker = threading.Thread(target=lambda: done.append(read_all(tmp_path)), daemon=True)
        worker.start()
        worker.join(timeout=20)
    assert done and [r.custom_id for r in done[0]] == ["c0"]
    assert (
        f"Input file {tmp_path}/pipe.jsonl (option 'prompts' / 'responses') is not a regular file"
        in caplog.text
    )


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz", "a.parquet"])
def test_a_listed_file_that_becomes_a_fifo_before_a_task_reads_it_fails_the_task(tmp_path, name):
    """The listing skips FIFOs; a FIFO put in a listed file's place afterwards is refused by
    the task that reads it, naming the file, instead of blocking it for good."""
    path = tmp_path / name
    if name.endswith(".parquet"):
        pq.write_table(pa.table({"prompt": ["p0"]}), path)
    else:
        path.write_bytes(gzip.compress(lines(0)) if name.endswith(".gz") else lines(0))
    (segment,) = PromptListing(str(tmp_path)).segments(Position(), Position(name, 1))
    path.unlink()
    os.mkfifo(path)
    raised: list[BaseException] = []

    def read() -> None:
        try:
            read_rows(segment)
        except DSparkJsonError as exc:
            raised.append(exc)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(timeout=60)  # a bound on blocking for good, not on this machine's speed
    assert raised, "the task blocked on the FIFO"
    assert f"Input file {path} is not a regular file (a FIFO" in str(raised[0])


def test_a_response_format_path_that_is_a_fifo_fails_instead_of_blocking(tmp_path):
    os.mkfifo(tmp_path / "schema.json")  # a device or a FIFO would be read forever
    outcome: list[BaseException | None] = []

    def parse() -> None:
        try:
            Options.parse(
                {
                    "endpoint": "http://h:1",
                    "prompts": "/p",
                    "responseFormat": str(tmp_path / "schema.json"),
                }
            )
            outcome.append(None)
        except OptionError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=parse, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert outcome and "is not a regular file" in str(outcome[0])


def test_read_bytes_refuses_a_fifo_and_reads_at_most_its_limit_decompressed_too(tmp_path):
    """The one way the source reads a whole small file (an endpoints file, a schema file): a
    FIFO or a device is refused on the descriptor opened without blocking, never read, and
    ``limit`` bounds the bytes held, after decompression (a 10 KB ``.gz`` may hold gigabytes)."""
    from dspark_json.fs import RefusedFile, read_bytes

    os.mkfifo(tmp_path / "pipe.txt")
    raised: list[BaseException] = []

    def read() -> None:
        try:
            read_bytes(str(tmp_path / "pipe.txt"), storage=ENVIRONMENT_ONLY)
        except RefusedFile as exc:
            raised.append(exc)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(timeout=60)  # a bound on blocking for good, not on this machine's speed
    assert raised and "is not a regular file (a FIFO): it is not read" in str(raised[0])
    with pytest.raises(RefusedFile, match="is not a regular file \\(a directory\\)"):
        read_bytes(str(tmp_path), storage=ENVIRONMENT_ONLY)
    bomb = tmp_path / "urls.txt.gz"
    bomb.write_bytes(gzip.compress(b"#" * 10_000_000))
    assert bomb.stat().st_size < 20_000
    with pytest.raises(RefusedFile, match="too large: more than 1000000 bytes once decompressed"):
        read_bytes(str(bomb), storage=ENVIRONMENT_ONLY, limit=1_000_000)
    assert len(read_bytes(str(bomb), storage=ENVIRONMENT_ONLY, limit=10_000_000)) == 10_000_000
    plain = tmp_path / "urls.txt"
    plain.write_bytes(b"x" * 11)
    with pytest.raises(RefusedFile, match="11 bytes as stored, over the limit of 10 bytes: it is"):
        read_bytes(str(plain), storage=ENVIRONMENT_ONLY, limit=10)


def test_a_recorded_answer_over_max_response_bytes_is_a_row_error_not_parsed(tmp_path):
    """Option responses: a recorded line larger than maxResponseBytes is refused as a live
    answer that large is (``response_too_large``), a batch line as well as a raw body; the
    others are read as before."""
    from dspark_json.inputs.recorded import read_recorded

    small = json.dumps({"choices": [{"message": {"content": "{}"}}]})
    big = json.dumps({"choices": [{"message": {"content": "x" * 500}}]})
    batch = json.dumps({"custom_id": "b", "response": {"status_code": 200, "body": big}})
    (tmp_path / "r.jsonl").write_text("\n".join([small, big, batch, small]) + "\n")
    rows, outcomes = read_recorded([Segment(str(tmp_path / "r.jsonl"), 0, 4)], max_bytes=300)
    assert sorted(outcomes.errors) == [1, 2]
    for row in (1, 2):
        error = outcomes.errors[row]
        assert error["type"] == "response_too_large" and error["status"] is None
        assert "over the limit set by maxResponseBytes=300" in error["message"]
        assert outcomes.bodies[row].as_py() is None
    assert outcomes.bodies[0].as_py() == small and outcomes.bodies[3].as_py() == small
    assert rows.custom_ids == [None, None, None, None]  # the big batch line is not read
    _, unbounded = read_recorded([Segment(str(tmp_path / "r.jsonl"), 0, 4)])
    assert not unbounded.errors and unbounded.bodies[2].as_py() == big
