"""Offsets over the input directory at their edges: limits across several files, an empty
directory, and what the query says when input files or the directory go missing or change."""

import logging

import pytest

from dspark_json.errors import DSparkJsonError, OptionError
from dspark_json.inputs import listing as listing_module
from dspark_json.inputs.listing import Position, PromptListing, Segment, read_rows
from tests.helpers import write_prompts


def rows(n, start=0):
    return [{"custom_id": f"c{i}", "prompt": f"p{i}"} for i in range(start, start + n)]


@pytest.fixture
def inbox(tmp_path):
    """A directory named with a trailing slash, as users write it."""
    directory = tmp_path / "queue-X"
    directory.mkdir()
    return directory


def names(segments):
    return [(s.path.rsplit("/", 1)[1], s.start, s.end) for s in segments]


def test_an_empty_directory_ends_where_it_starts(inbox):
    listing = PromptListing(f"{inbox}/")
    assert listing.end() == Position()
    assert listing.advance(Position()) == Position()
    assert listing.segments(Position(), Position()) == []


def test_max_rows_counts_rows_over_several_files(inbox):
    write_prompts(inbox, "a.jsonl", rows(2))
    write_prompts(inbox, "b.jsonl", rows(5, 2))
    write_prompts(inbox, "c.jsonl", rows(5, 7))
    listing = PromptListing(str(inbox))
    assert listing.advance(Position(), max_rows=4) == Position("b.jsonl", 2)
    assert listing.advance(Position(), max_rows=4, max_files=1) == Position("a.jsonl", 2)


def test_a_cap_inside_a_file_stops_at_its_row(inbox):
    write_prompts(inbox, "a.jsonl", rows(5))
    write_prompts(inbox, "b.jsonl", rows(5, 5))
    listing = PromptListing(str(inbox))
    assert listing.advance(Position(), cap=Position("a.jsonl", 2)) == Position("a.jsonl", 2)
    assert listing.advance(Position("a.jsonl", 2), cap=Position("b.jsonl", 1)) == Position(
        "b.jsonl", 1
    )


def test_segments_skip_files_with_nothing_between_the_positions(inbox):
    write_prompts(inbox, "a.jsonl", rows(2))
    write_prompts(inbox, "b.jsonl", rows(3, 2))
    write_prompts(inbox, "c.jsonl", rows(3, 5))
    listing = PromptListing(str(inbox))
    assert names(listing.segments(Position("a.jsonl", 2), Position("b.jsonl", 3))) == [
        ("b.jsonl", 0, 3)
    ]
    assert names(listing.segments(Position("b.jsonl", 1), Position("c.jsonl", 0))) == [
        ("b.jsonl", 1, 3)
    ]


def test_a_file_gone_before_its_rows_were_read_is_named_with_the_rows(inbox):
    for name, n in (("a.jsonl", 3), ("b.jsonl", 1), ("c.jsonl", 4)):
        write_prompts(inbox, name, rows(n))
    listing = PromptListing(f"{inbox}/")
    end = listing.advance(Position())
    (inbox / "c.jsonl").unlink()
    with pytest.raises(DSparkJsonError) as caught:
        listing.segments(Position("b.jsonl", 0), end)
    assert str(caught.value) == (
        f"Input file {inbox}/c.jsonl disappeared before the query read its rows 1-4. Leave "
        "input files in place until the query has read them; put it back, or start the query "
        "again with a new checkpoint."
    )
    (inbox / "b.jsonl").unlink()
    with pytest.raises(
        DSparkJsonError, match=r"b.jsonl disappeared before the query read its row 1\."
    ):
        listing.segments(Position("a.jsonl", 3), end)
    with pytest.raises(
        DSparkJsonError, match=r"c.jsonl disappeared before the query read its rows 3-4\."
    ):
        listing.advance(Position("c.jsonl", 2))


def test_a_file_already_read_may_go(inbox):
    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        write_prompts(inbox, name, rows(2))
    listing = PromptListing(str(inbox))
    end = listing.advance(Position())
    (inbox / "a.jsonl").unlink()  # read in full
    (inbox / "c.jsonl").unlink()  # after the end of the batch asked for
    assert names(listing.segments(Position("b.jsonl", 0), Position("b.jsonl", 2))) == [
        ("b.jsonl", 0, 2)
    ]
    (inbox / "b.jsonl").unlink()
    with pytest.raises(DSparkJsonError, match=r"c\.jsonl disappeared"):
        listing.advance(Position("b.jsonl", 2))
    assert listing.advance(end) == end


def test_a_file_in_the_offsets_but_gone_after_a_restart(inbox):
    write_prompts(inbox, "a.jsonl", rows(2))
    restarted = PromptListing(f"{inbox}/")
    with pytest.raises(DSparkJsonError) as caught:
        restarted.segments(Position("a.jsonl", 2), Position("b.jsonl", 1))
    assert str(caught.value) == (
        f"Input file {inbox}/b.jsonl is gone, but the query's offsets include its first 1 rows "
        "(a micro-batch being run again after a restart). Put the file back, or start the "
        "query again with a new checkpoint."
    )


def test_a_missing_or_wrong_directory_is_named_with_its_option(inbox):
    with pytest.raises(OptionError) as caught:
        PromptListing(str(inbox / "nope"), option="prompts").end()
    assert str(caught.value) == (
        f"Option 'prompts' names {inbox}/nope, which does not exist. Create the directory (a "
        "streaming query then picks up files as they land in it), or fix the path."
    )
    write_prompts(inbox, "a.jsonl", rows(1))
    with pytest.raises(OptionError) as caught:
        PromptListing(str(inbox / "a.jsonl")).end()
    assert str(caught.value) == (
        f"Option 'prompts' / 'responses' names {inbox}/a.jsonl, which is a file; give the "
        "directory that holds the input files (new files are picked up as they land)."
    )
    listing = PromptListing(str(inbox), option="responses")
    listing.end()
    for path in inbox.iterdir():
        path.unlink()
    inbox.rmdir()
    with pytest.raises(DSparkJsonError) as caught:
        listing.end()
    assert str(caught.value) == (
        f"The input directory {inbox} (option 'responses') disappeared while the query was "
        "reading it. Put it back, or start the query again with a new checkpoint."
    )


def test_a_file_that_vanishes_while_being_counted(inbox, monkeypatch):
    write_prompts(inbox, "a.jsonl", rows(1))

    def vanished(path, **kwargs):
        raise FileNotFoundError(path)

    monkeypatch.setattr(listing_module, "index_rows", vanished)
    with pytest.raises(DSparkJsonError) as caught:
        PromptListing(str(inbox)).end()
    assert str(caught.value) == (
        f"Input file {inbox}/a.jsonl disappeared while it was being listed. Leave input files "
        "in place until the query has read them."
    )


def test_reading_a_segment_whose_file_is_gone_or_shorter(inbox):
    write_prompts(inbox, "a.jsonl", rows(3))
    path = f"{inbox}/a.jsonl"
    assert [where for _, where in read_rows(Segment(path, 1, 3))] == [
        f"{path} row 2",
        f"{path} row 3",
    ]
    with pytest.raises(DSparkJsonError) as caught:
        read_rows(Segment(path, 1, 5))
    assert str(caught.value) == (
        f"Input file {path} holds 3 rows now, but 5 or more were counted when it was listed: "
        "input files must not change once visible (write a new file under a hidden name, then "
        "rename it into place). Put the original back."
    )
    with pytest.raises(DSparkJsonError) as caught:
        read_rows(Segment(f"{inbox}/b.jsonl", 2, 4))
    assert str(caught.value) == (
        f"Input file {inbox}/b.jsonl is gone: its rows 3-4 were listed for this micro-batch but "
        "cannot be read. Leave input files in place until the query has read them; put it back, "
        "or start the query again with a new checkpoint."
    )


def test_only_a_file_sorting_before_the_offset_is_late(inbox, caplog):
    write_prompts(inbox, "b.jsonl", rows(1))
    listing = PromptListing(str(inbox))
    end = listing.advance(Position())
    write_prompts(inbox, "c.jsonl", rows(1))  # after the offset: simply new
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        assert listing.advance(end) == Position("c.jsonl", 1)
        assert listing.advance(Position("d.jsonl", 0)) == Position("d.jsonl", 0)
        write_prompts(inbox, "d.jsonl", rows(1))  # named as the offset: read from its start
        assert listing.advance(Position("d.jsonl", 0)) == Position("d.jsonl", 1)
    assert "appeared after the stream had moved past" not in caplog.text
