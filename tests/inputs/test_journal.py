"""The journal of answers: an entry reads back what was written, keys name the rows, prune
removes committed entries only; and where its directory misbehaves: an entry that cannot be
written is reported, not fatal, one that cannot be read is sent again, prune touches only
entries, whatever else lies in the directory."""

import logging
import os
import shutil
import threading

from dspark_json.inputs import journal as journal_module
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


def save(journal, name, end):
    key = journal.key([Segment(f"/in/{name}", end - 1, end)])
    assert journal.save(key, Position(name, end), Outcomes.of([Outcome(body="{}")]))
    return key


def test_an_entry_that_cannot_be_written_is_logged_and_the_rows_go_on(tmp_path, caplog):
    blocked = tmp_path / "journal"
    blocked.write_text("a file where the directory should be")
    journal = Journal(str(blocked))
    with caplog.at_level(logging.ERROR, logger="dspark_json"):
        assert journal.save("k", Position("a.jsonl", 1), Outcomes.of([Outcome(body="{}")])) is False
    assert "the answers of entry k could not be written" in caplog.text
    assert journal.load("k") is None
    assert journal.prune(Position("z.jsonl", 0)) == 0


def test_prune_deletes_committed_entries_among_other_files(tmp_path):
    journal = Journal(str(tmp_path / "j"))
    keys = [save(journal, f"p{i:02d}.jsonl", 1) for i in range(12)]
    for i in range(12):
        (tmp_path / "j" / f"note-{i:02d}.txt").write_text("not an entry")
        (tmp_path / "j" / f"other-{i:02d}.arrow").write_bytes(b"not arrow either")
    (tmp_path / "j" / "sub.arrow").mkdir()
    # an entry's bytes under a name that is not an entry's: not the journal's to delete
    shutil.copy(tmp_path / "j" / f"{keys[0]}.arrow", tmp_path / "j" / "copy.arrow.bak")
    assert journal.prune(Position("p11.jsonl", 1)) == 12
    left = sorted(p.name for p in (tmp_path / "j").iterdir())
    assert len(left) == 12 + 12 + 2 and "copy.arrow.bak" in left and "sub.arrow" in left


def test_an_entry_that_cannot_be_read_is_sent_again(tmp_path, caplog):
    journal = Journal(str(tmp_path))
    (tmp_path / "k.arrow").write_bytes(b"torn")
    with caplog.at_level(logging.ERROR, logger="dspark_json"):
        assert journal.load("k") is None
    assert "entry k cannot be read" in caplog.text


def test_a_fifo_named_like_an_entry_is_not_opened_and_its_prompts_are_sent_again(tmp_path, caplog):
    """Anyone who can write the journal's directory could put a FIFO there: opened to read, it
    blocks the task until someone writes to it (requestDeadline cannot cut an open)."""
    os.mkfifo(tmp_path / "k.arrow")
    found: list[object] = []
    with caplog.at_level(logging.ERROR, logger="dspark_json"):
        worker = threading.Thread(target=lambda: found.append(Journal(str(tmp_path)).load("k")))
        worker.daemon = True
        worker.start()
        worker.join(timeout=60)  # a bound on blocking for good, not on this machine's speed
    assert found == [None], "the task blocked on the FIFO"
    assert "entry k cannot be read" in caplog.text and "is not a regular file" in caplog.text


def test_entries_go_in_the_directory_named_whatever_its_spelling(tmp_path):
    for spelling in (f"{tmp_path}/answers-X/", f"{tmp_path}/answers-X"):
        journal = Journal(spelling)
        key = save(journal, "a.jsonl", 1)
        assert (tmp_path / "answers-X" / f"{key}.arrow").is_file()
        assert list(journal.load(key)) == [Outcome(body="{}")]
        assert journal.prune(Position("a.jsonl", 1)) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["answers-X"]


class _Stuck:
    """The local filesystem, except that the first entry prune deletes cannot be deleted (a
    lock, a permission)."""

    def __init__(self, fs):
        self.fs, self.stuck = fs, None

    def __getattr__(self, name):
        return getattr(self.fs, name)

    def delete_file(self, path):
        if self.stuck is None:
            self.stuck = path
        if path == self.stuck:
            raise PermissionError(f"cannot delete {path}")
        self.fs.delete_file(path)


def test_an_entry_that_cannot_be_deleted_does_not_stop_the_others(tmp_path, monkeypatch, caplog):
    journal = Journal(str(tmp_path))
    for i in range(8):
        save(journal, f"p{i:02d}.jsonl", 1)
    real = journal_module.resolve
    stuck = []

    def resolve(directory, storage):
        fs, root = real(directory, storage)
        stuck.append(_Stuck(fs))
        return stuck[-1], root

    monkeypatch.setattr(journal_module, "resolve", resolve)
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        assert journal.prune(Position("p99.jsonl", 0)) == 7
    assert [str(p) for p in tmp_path.iterdir()] == [stuck[-1].stuck]
    assert "cannot prune" in caplog.text


def test_re_ask_rounds_are_kept_next_to_their_entry_and_pruned_with_it(tmp_path):
    journal = Journal(str(tmp_path / "j"))
    key = save(journal, "a.jsonl", 3)
    error = {"status": 503, "type": "ServiceUnavailable", "message": "busy", "attempts": 5}
    asked = Outcomes.of([Outcome(body='{"fixed": 1}'), Outcome(error=error)])
    assert journal.load_round(key, 1) is None
    assert journal.save_round(key, 1, Position("a.jsonl", 3), [0, 2], asked)
    rows, outcomes = journal.load_round(key, 1)
    assert rows == [0, 2] and list(outcomes) == list(asked)
    assert journal.load_round(key, 2) is None
    assert journal.load(key) is not None  # the entry's own answers are untouched
    assert journal.prune(Position("a.jsonl", 3)) == 2
    assert journal.load_round(key, 1) is None and journal.load(key) is None
