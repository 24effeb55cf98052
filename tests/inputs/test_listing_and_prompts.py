import logging

from dspark_json.inputs.listing import Position, PromptListing, Segment, plan_partitions
from dspark_json.inputs.prompts import infer_passthrough, read_segment
from tests.helpers import write_prompts


def rows(n, start=0):
    return [{"custom_id": f"c{i}", "prompt": f"p{i}"} for i in range(start, start + n)]


def test_hidden_and_underscore_files_and_other_suffixes_are_ignored(tmp_path):
    write_prompts(tmp_path, "a.jsonl", rows(2))
    (tmp_path / ".b.jsonl").write_text('{"prompt": "x"}\n')
    (tmp_path / "_c.jsonl").write_text('{"prompt": "x"}\n')
    (tmp_path / "d.txt").write_text('{"prompt": "x"}\n')
    assert [(e.name, n) for e, n in PromptListing(str(tmp_path)).files()] == [("a.jsonl", 2)]


def test_advance_respects_row_and_file_limits_and_cap(tmp_path):
    write_prompts(tmp_path, "a.jsonl", rows(3))
    write_prompts(tmp_path, "b.jsonl", rows(4, 3))
    listing = PromptListing(str(tmp_path))
    assert listing.advance(Position()) == Position("b.jsonl", 4)
    assert listing.advance(Position(), max_rows=2) == Position("a.jsonl", 2)
    assert listing.advance(Position("a.jsonl", 2), max_rows=3) == Position("b.jsonl", 2)
    assert listing.advance(Position(), max_files=1) == Position("a.jsonl", 3)
    assert listing.advance(Position("a.jsonl", 3), max_files=1) == Position("b.jsonl", 4)
    assert listing.advance(Position(), cap=Position("a.jsonl", 3)) == Position("a.jsonl", 3)
    end = listing.end()
    assert listing.advance(end) == end


def test_segments_and_partitions_cover_each_row_once(tmp_path):
    write_prompts(tmp_path, "a.jsonl", rows(5))
    write_prompts(tmp_path, "b.jsonl", rows(4, 5))
    listing = PromptListing(str(tmp_path))
    segments = listing.segments(Position("a.jsonl", 2), Position("b.jsonl", 3))
    assert [(s.path.rsplit("/", 1)[1], s.start, s.end) for s in segments] == [
        ("a.jsonl", 2, 5),
        ("b.jsonl", 0, 3),
    ]
    parts = plan_partitions(segments, 2)
    assert [sum(s.end - s.start for s in p.segments) for p in parts] == [2, 2, 2]
    ids = [r.custom_id for p in parts for s in p.segments for r in read_segment(s)]
    assert ids == ["c2", "c3", "c4", "c5", "c6", "c7"]


def test_a_late_file_sorting_before_the_offset_is_reported(tmp_path, caplog):
    write_prompts(tmp_path, "b.jsonl", rows(1))
    listing = PromptListing(str(tmp_path))
    end = listing.advance(Position())
    write_prompts(tmp_path, "a.jsonl", rows(1))
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        assert listing.advance(end) == end
    assert "'a.jsonl' appeared after the stream had moved past" in caplog.text


def test_blank_lines_do_not_count_and_bad_rows_say_why(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(
        '{"prompt": "one"}\n\n[1]\n{"messages": [{"role": "user", "content": "hi"}]}\n'
        'not json\n{"custom_id": 7}\n'
    )
    records = list(read_segment(Segment(str(path), 0, 5)))
    assert [r.problem for r in records] == [
        None,
        "not a JSON object",
        None,
        "not valid JSON (Expecting value)",
        "neither a 'prompt' string nor a non-empty 'messages' list",
    ]
    assert records[0].messages == [{"role": "user", "content": "one"}]
    assert records[4].custom_id == "7" and records[4].describe().startswith("custom_id '7'")
    assert records[3].where.endswith("a.jsonl row 4")


def test_passthrough_columns_are_typed_and_renamed_on_collision(tmp_path):
    write_prompts(
        tmp_path,
        "a.jsonl",
        [
            {"prompt": "p", "n": 1, "x": 1, "flag": True, "id": "mine", "messages": None},
            {"prompt": "p", "n": 2, "x": 2.5, "tags": ["a"]},
        ],
    )
    fields = {
        f.name: f.dataType.simpleString() for f in infer_passthrough(PromptListing(str(tmp_path)))
    }
    assert fields == {
        "prompt": "string",
        "n": "bigint",
        "x": "double",
        "flag": "boolean",
        "input_id": "string",
        "tags": "string",
    }


def test_a_row_with_model_and_input_model_beyond_the_sample_loses_neither():
    """The sample typed one column ``input_model`` (from either field); a later row with both
    fields keeps field ``input_model`` in that column and field ``model`` under its own name,
    which no prompt column has: it lands in ``_rescued_data``."""
    from dspark_json.inputs.prompts import passthrough_row

    assert passthrough_row({"model": "a", "input_model": "b", "id": 1}) == {
        "model": "a",
        "input_model": "b",
        "input_id": 1,
    }
    assert passthrough_row({"model": "a"}) == {"input_model": "a"}
