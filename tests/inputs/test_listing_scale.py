"""What a micro-batch's listing costs does not grow with the files already read: files are
counted only when a batch reaches them, what is known of files read is dropped, and symbolic
links in the directory are not followed."""

from __future__ import annotations

import logging

import pytest

from dspark_json.errors import DSparkJsonError
from dspark_json.inputs import listing as listing_module
from dspark_json.inputs.listing import Position, PromptListing
from dspark_json.inputs.prompts import infer_passthrough
from tests.helpers import write_prompts


def rows(n: int, start: int = 0) -> list[dict]:
    return [{"custom_id": f"c{i}", "prompt": f"p{i}"} for i in range(start, start + n)]


@pytest.fixture
def counted(monkeypatch):
    """The names of the files the listing counts (indexes), in order."""
    names: list[str] = []
    real = listing_module.index_rows

    def index_rows(path: str, **kwargs):
        names.append(path.rsplit("/", 1)[-1])
        return real(path, **kwargs)

    monkeypatch.setattr(listing_module, "index_rows", index_rows)
    monkeypatch.setattr(listing_module, "_INDEXES", type(listing_module._INDEXES)())
    return names


def test_a_batch_counts_only_the_files_it_takes_and_the_last_one(tmp_path, counted):
    for i in range(20):
        write_prompts(tmp_path, f"f{i:02}.jsonl", rows(3))
    listing = PromptListing(str(tmp_path))
    assert listing.advance(Position(), max_files=2) == Position("f01.jsonl", 3)
    assert counted == ["f00.jsonl", "f01.jsonl"]
    assert listing.end() == Position("f19.jsonl", 3)
    assert counted[-1] == "f19.jsonl" and len(counted) == 3


def test_what_is_remembered_does_not_grow_with_the_files_read(tmp_path, counted):
    for i in range(60):
        write_prompts(tmp_path, f"f{i:02}.jsonl", rows(2))
    listing = PromptListing(str(tmp_path))
    position, batches = Position(), 0
    while (nxt := listing.advance(position, max_files=5)) != position:
        segments = listing.segments(position, nxt)
        assert sum(s.end - s.start for s in segments) == 10
        position, batches = nxt, batches + 1
        assert len(listing._rows) <= 6  # the batch's files and the one at the offset
    assert batches == 12
    assert len(counted) == 60  # each file counted once


def test_a_batch_replanned_from_an_earlier_offset_counts_its_files_again(tmp_path, counted):
    for i in range(6):
        write_prompts(tmp_path, f"f{i}.jsonl", rows(2))
    listing = PromptListing(str(tmp_path))
    far = listing.advance(Position("f4.jsonl", 0))
    assert far == Position("f5.jsonl", 2)
    again = listing.segments(Position("f1.jsonl", 1), Position("f2.jsonl", 2))
    assert [(s.path.rsplit("/", 1)[-1], s.start, s.end) for s in again] == [
        ("f1.jsonl", 1, 2),
        ("f2.jsonl", 0, 2),
    ]


def test_a_file_not_read_yet_that_disappears_still_fails_the_query(tmp_path):
    for i in range(4):
        write_prompts(tmp_path, f"f{i}.jsonl", rows(2))
    listing = PromptListing(str(tmp_path))
    end = listing.advance(Position(), max_files=2)
    listing.advance(end, max_files=1)  # counts f2
    (tmp_path / "f0.jsonl").unlink()  # read: fine
    (tmp_path / "f2.jsonl").unlink()
    with pytest.raises(DSparkJsonError, match=r"f2\.jsonl disappeared before the query read"):
        listing.advance(end)


def test_symbolic_links_are_not_followed_and_said_once(tmp_path, caplog):
    outside = tmp_path / "outside"
    write_prompts(outside, "secret.jsonl", [{"prompt": "not for the model", "ssn": "1"}])
    inbox = tmp_path / "inbox"
    write_prompts(inbox, "a.jsonl", rows(2))
    (inbox / "b.jsonl").symlink_to(outside / "secret.jsonl")
    (inbox / "c.jsonl").symlink_to(outside)  # a link to a directory
    listing = PromptListing(str(inbox))
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        assert [(e.name, n) for e, n in listing.files()] == [("a.jsonl", 2)]
        assert listing.advance(Position()) == Position("a.jsonl", 2)
        assert "ssn" not in [f.name for f in infer_passthrough(listing)]
    warnings = [r.getMessage() for r in caplog.records if "symbolic link" in r.getMessage()]
    assert len(warnings) == 2
    assert any("b.jsonl is a symbolic link: it is not read" in w for w in warnings)
    assert any("c.jsonl is a symbolic link" in w for w in warnings)


def test_the_schema_sample_counts_and_reads_only_what_it_samples(tmp_path, counted):
    write_prompts(tmp_path, "a.jsonl", [{"prompt": "p", "n": i} for i in range(5000)])
    write_prompts(tmp_path, "b.jsonl", [{"prompt": "p", "late": "x"}])
    fields = infer_passthrough(PromptListing(str(tmp_path)), sample_rows=100)
    assert "n" in [f.name for f in fields] and "late" not in [f.name for f in fields]
    assert counted == ["a.jsonl"]


def test_a_sample_counts_and_reads_only_the_files_it_reaches(tmp_path, counted):
    for name in ("a", "b", "c"):
        write_prompts(tmp_path, f"{name}.jsonl", rows(3))
    listing = PromptListing(str(tmp_path))
    taken = []
    for segment in listing.sample(2):
        taken.append((segment.path.rsplit("/", 1)[-1], segment.start, segment.end))
        if len(taken) == 3:
            break
    assert taken == [("a.jsonl", 0, 2), ("a.jsonl", 2, 3), ("b.jsonl", 0, 2)]
    assert counted == ["a.jsonl", "b.jsonl"]


def test_a_file_listed_but_not_reached_yet_that_disappears_fails_the_query(tmp_path):
    for i in range(4):
        write_prompts(tmp_path, f"f{i}.jsonl", rows(2))
    listing = PromptListing(str(tmp_path))
    end = listing.advance(Position(), max_files=1)  # lists f0-f3, counts f0 only
    (tmp_path / "f3.jsonl").unlink()
    with pytest.raises(DSparkJsonError, match=r"f3\.jsonl disappeared before the query read its"):
        listing.advance(end, max_files=1)
