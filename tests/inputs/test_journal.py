from dspark_json.inputs.journal import Journal
from dspark_json.inputs.listing import Position, Segment
from dspark_json.records import Outcome, Outcomes

ERROR = {"status": 400, "type": "BadRequestError", "message": "no", "attempts": 1}


def test_an_entry_reads_back_what_was_written_and_leaves_no_temporary(tmp_path):
    journal = Journal(str(tmp_path / "j"))
    key = journal.key([Segment("/in/a.jsonl", 0, 2)])
    assert journal.load(key) is None
    outcomes = [Outcome(body='{"id": "x", "text": "é \\u2028"}'), Outcome(error=ERROR)]
    journal.save(key, Position("a.jsonl", 2), Outcomes.of(outcomes))
    assert list(journal.load(key)) == outcomes
    assert [p.name for p in (tmp_path / "j").iterdir()] == [f"{key}.arrow"]


def test_keys_name_the_rows_not_the_directory():
    one = Journal.key([Segment("/x/a.jsonl", 0, 2), Segment("/x/b.jsonl", 0, 5)])
    assert one == Journal.key([Segment("s3://bucket/x/a.jsonl", 0, 2), Segment("/y/b.jsonl", 0, 5)])
    assert one != Journal.key([Segment("/x/a.jsonl", 0, 3), Segment("/x/b.jsonl", 0, 5)])


def test_prune_removes_committed_entries_only(tmp_path):
    journal = Journal(str(tmp_path))
    for name, end in (("a.jsonl", 10), ("b.jsonl", 4), ("b.jsonl", 9)):
        key = journal.key([Segment(f"/in/{name}", end - 1, end)])
        journal.save(key, Position(name, end), Outcomes.of([Outcome(body="{}")]))
    (tmp_path / "unrelated.arrow").write_bytes(b"not arrow")
    assert journal.prune(Position("b.jsonl", 4)) == 2
    assert len(list(tmp_path.glob("*.arrow"))) == 2  # b.jsonl@9 and the unrelated file
    assert journal.prune(Position("a.jsonl", 0)) == 0
