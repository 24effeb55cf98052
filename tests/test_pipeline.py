"""The source's partition work in process: what it hands to Spark."""

import gzip
import json

import pyarrow as pa
import pytest

from dspark_json import pipeline
from dspark_json.source import DSparkJsonDataSource

CONTENT = {"type": "object", "properties": {"n": {"type": "integer"}}}


def _body(n: int) -> str:
    message = {"role": "assistant", "content": json.dumps({"n": n})}
    return json.dumps({"id": f"r{n}", "choices": [{"index": 0, "message": message}]})


def test_a_partition_is_handed_on_in_batches_of_at_most_batch_rows_in_order(tmp_path, monkeypatch):
    """Spark takes a large partition faster in batches of its own size (10,000 rows)."""
    monkeypatch.setattr(pipeline, "SPARK_BATCH_ROWS", 4)
    (tmp_path / "r.jsonl").write_text("".join(_body(n) + "\n" for n in range(10)))
    source = DSparkJsonDataSource(
        {"responses": str(tmp_path), "responseFormat": json.dumps(CONTENT), "parseMode": "cpu"}
    )
    reader = source.reader(source.schema())
    (partition,) = reader.partitions()
    batches = list(reader.read(partition))
    assert [b.num_rows for b in batches] == [4, 4, 2]
    table = pa.Table.from_batches(batches)
    assert table.column("parsed").to_pylist() == [{"n": n} for n in range(10)]
    assert table.column("id").to_pylist() == [f"r{n}" for n in range(10)]


def test_re_asks_are_journaled_and_a_replay_of_the_partition_asks_nothing(tmp_path):
    """The source's partition work against the simulator process, twice on one journal: the
    second read (a replay, or a retried task) gets the same rows, re-asks included, and sends
    nothing. FAILFAST is applied to the rows as repaired."""
    from dspark_json.dev.local import SimulatorProcess
    from dspark_json.dev.simulator import Faults
    from tests.helpers import write_prompts

    schema = {
        "type": "object",
        "properties": {"word": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["word", "n"],
    }
    rows = [{"custom_id": f"q{i}", "prompt": f"Question {i}"} for i in range(30)]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    faults = Faults(first_truncated_rate=0.2, first_prose_rate=0.2, first_invalid_rate=0.2)
    with SimulatorProcess(seed=2, faults=faults) as server:

        def read():
            source = DSparkJsonDataSource(
                {
                    "endpoint": server.url,
                    "prompts": str(tmp_path / "in"),
                    "journal": str(tmp_path / "journal"),
                    "responseFormat": json.dumps(schema),
                    "validateSchema": "true",
                    "maxTokens": "32",
                    "repairAttempts": "2",
                    "mode": "FAILFAST",
                    "parseMode": "cpu",
                }
            )
            reader = source.reader(source.schema())
            return pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)])

        first = read()
        asked = server.stats()
        again = read()
        # Nothing sent (but the driver's /v1/models check): first answers and re-asks read back.
        assert server.stats()["chat_completions"] == asked["chat_completions"]
    assert asked["reasks"] > 0
    assert set(first.column("_status").to_pylist()) == {"ok"}  # FAILFAST saw the repaired rows
    attempts = first.column("_attempts").to_pylist()
    assert sum(len(a) - 1 for a in attempts if a) == asked["reasks"]
    assert again.equals(first)
    assert len(list((tmp_path / "journal").glob("*.repair-*.arrow"))) >= 1


@pytest.mark.parametrize("form", ["jsonl", "gz"])
def test_a_batchs_tasks_share_the_repair_token_budget_and_spend_at_most_it(tmp_path, form):
    """repairTokenBudget caps the re-asks of the whole batch: the driver gives each of its
    partitions (or, for a compressed file, each part) a share in proportion to its rows, the
    remainder to the first, and no task spends past its share. Every first answer here is prose
    that a re-ask fixes: one task alone would spend ~640 tokens fixing its 10 rows."""
    from dspark_json.dev.local import SimulatorProcess
    from dspark_json.dev.simulator import Faults
    from dspark_json.metrics import summary

    schema = {
        "type": "object",
        "properties": {"word": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["word", "n"],
    }
    lines = "".join(
        json.dumps({"custom_id": f"q{i}", "prompt": f"Question {i}"}) + "\n" for i in range(35)
    )
    (tmp_path / "in").mkdir()
    if form == "gz":
        (tmp_path / "in" / "a.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    else:
        (tmp_path / "in" / "a.jsonl").write_text(lines)
    with SimulatorProcess(seed=2, faults=Faults(first_prose_rate=1.0)) as server:
        source = DSparkJsonDataSource(
            {
                "endpoint": server.url,
                "prompts": str(tmp_path / "in"),
                "responseFormat": json.dumps(schema),
                "maxTokens": "32",
                "repairAttempts": "1",
                "repairTokenBudget": "703",
                "partitionSize": "10",
                "metrics": str(tmp_path / "metrics"),
                "parseMode": "cpu",
            }
        )
        reader = source.reader(source.schema())
        partitions = reader.partitions()
        tasks = [t for p in partitions for t in (p.parts or (p,))]
        assert [t.repair_token_budget for t in tasks] == [203, 200, 200, 100]
        table = pa.Table.from_batches([b for p in partitions for b in reader.read(p)])
        asked = server.stats()["reasks"]
    records = [json.loads(p.read_text()) for p in (tmp_path / "metrics").glob("*.json")]
    repairs = [r["repair"] for r in records]
    assert sorted(r["budget"] for r in repairs) == [100, 200, 200, 203]
    spent = sum(r["prompt_tokens"] + r["completion_tokens"] for r in repairs)
    assert 0 < spent <= 703
    assert sum(r["reasks"] for r in repairs) == asked < 35
    assert sum(r["over_budget"] for r in repairs) == 35 - asked > 0  # the metrics say so
    attempts = [a for a in table.column("_attempts").to_pylist() if a]
    refused = [a for a in attempts if "repairTokenBudget is spent" in (a[-1]["reason"] or "")]
    assert len(refused) == 35 - asked
    assert f"of a budget of 703, {35 - asked} over budget" in summary(records, "batch")


def test_validate_schema_names_each_rows_own_violations_in_order(tmp_path):
    """validateSchema reads the bodies as text only when it is on; each row gets its own."""
    bodies = [_body(0), _body(1).replace('\\"n\\": 1', '\\"n\\": \\"one\\"'), _body(2), _body(3)]
    (tmp_path / "r.jsonl").write_text("".join(b + "\n" for b in bodies))
    options = {"responses": str(tmp_path), "responseFormat": json.dumps(CONTENT)}
    source = DSparkJsonDataSource({**options, "parseMode": "cpu", "validateSchema": "true"})
    reader = source.reader(source.schema())
    (partition,) = reader.partitions()
    found = pa.Table.from_batches(list(reader.read(partition))).column("_schema_violations")
    assert [bool(v) for v in found.to_pylist()] == [False, True, False, False]
    assert "n" in found[1].as_py()[0]


def test_generate_and_the_source_share_one_runner_that_puts_the_frame_first(tmp_path):
    """run_partition, generate()'s shape: the DataFrame's columns first, then the answers in
    the output schema's order, a bad prompt kept with its _error and _corrupt_record, and
    _attempts from the registry when repairAttempts is on."""
    from dspark_json.load import query_schema
    from dspark_json.options import Options, Query
    from dspark_json.records import Fetched, Outcomes, PromptRecord, PromptRows

    raw = {"endpoint": "http://h:1", "responseFormat": json.dumps(CONTENT)}
    query = Query(
        options=Options.parse({**raw, "repairAttempts": "1"}, unused=("prompts",)),
        json_schema=CONTENT,
    )
    schema = query_schema(query)
    answers_schema = type(schema)([f for f in schema.fields if f.name != "custom_id"])
    asked = [{"role": "user", "content": "q"}]
    good = PromptRecord(custom_id=None, fields={}, raw="q", where="row 0", messages=asked)
    bad = PromptRecord(
        custom_id=None, fields={}, raw="", where="row 1", messages=None, problem="empty"
    )
    fetched = Fetched(outcomes=Outcomes(pa.array([_body(7), None], pa.string())))
    frame = pa.table({"question": ["q", ""], "k": [1, 2]})
    out = pipeline.run_partition(
        PromptRows.of([good, bad]),
        query,
        answers_schema,
        fetched,
        started=0.0,
        batch="b",
        partition=0,
        what="test",
        source="recorded",  # nothing re-asked
        leading=frame,
    )
    assert out.column_names == ["question", "k", *answers_schema.names]
    assert out.column_names[-1] == "_attempts"
    assert out.column("question").to_pylist() == ["q", ""]
    assert out.column("parsed").to_pylist() == [{"n": 7}, None]
    assert out.column("_status").to_pylist() == ["ok", "invalid_prompt"]
    assert out.column("_corrupt_record").to_pylist() == [None, ""]
    assert out.column("_error")[1].as_py()["type"] == "invalid_prompt"
    assert out.column("_attempts").to_pylist() == [None, None]


def test_validate_schema_reads_the_parsers_table_and_decodes_no_body(tmp_path, monkeypatch):
    """The violations come from the answers the parser already read; a user schema without a
    field they need (no usage) reads the bodies instead, with the same violations."""
    from dspark_json.response import answers

    bodies = [_body(0), _body(1).replace('\\"n\\": 1', '\\"n\\": \\"one\\"')]
    (tmp_path / "r.jsonl").write_text("".join(b + "\n" for b in bodies))
    options = {"responses": str(tmp_path), "responseFormat": json.dumps(CONTENT)}
    source = DSparkJsonDataSource({**options, "parseMode": "cpu", "validateSchema": "true"})
    decoded = answers.decode_answer
    monkeypatch.setattr(answers, "decode_answer", lambda body: pytest.fail(f"decoded {body}"))
    full = source.schema()

    def violations(schema):
        reader = source.reader(schema)
        (partition,) = reader.partitions()
        found = pa.Table.from_batches(list(reader.read(partition))).column("_schema_violations")
        return found.to_pylist()

    listed = violations(full)
    assert listed[0] == [] and "n" in listed[1][0]
    read = []
    monkeypatch.setattr(answers, "decode_answer", lambda body: read.append(body) or decoded(body))
    pruned = type(full)([f for f in full.fields if f.name != "usage"])
    assert violations(pruned) == listed and read == bodies


def test_a_pruned_schema_rescues_only_the_answer_and_still_finds_its_misfits(tmp_path, monkeypatch):
    """A user schema without _rescued_data (id, parsed, _status): the parser is asked to rescue
    only under parsed (the envelope's unknown keys cost nothing and are no error), and an answer
    value that does not fit its field still makes the row schema_mismatch, as with the whole
    schema."""
    from dspark_json.parse import make_parser

    scopes = []

    def spy(*args, **kwargs):
        scopes.append(kwargs.get("rescue", "all"))
        return make_parser(*args, **kwargs)

    monkeypatch.setattr(pipeline, "make_parser", spy)
    bodies = [_body(0), _body(1).replace('\\"n\\": 1', '\\"n\\": \\"one\\"'), _body(2)]
    drift = ', "reasoning": "why", "usage": {"prompt_tokens": 3, "details": {"cached": 1}}}'
    bodies = [b[:-1] + drift for b in bodies]
    (tmp_path / "r.jsonl").write_text("".join(b + "\n" for b in bodies))
    source = DSparkJsonDataSource(
        {"responses": str(tmp_path), "responseFormat": json.dumps(CONTENT), "parseMode": "cpu"}
    )
    whole = source.schema()
    pruned = type(whole)([whole[name] for name in ("id", "parsed", "_status")])
    statuses = {}
    for name, schema in (("whole", whole), ("pruned", pruned)):
        reader = source.reader(schema)
        (partition,) = reader.partitions()
        table = pa.Table.from_batches(list(reader.read(partition)))
        assert table.column_names == schema.names
        statuses[name] = table.column("_status").to_pylist()
    assert scopes == ["all", "parsed"]
    assert statuses["pruned"] == statuses["whole"] == ["ok", "schema_mismatch", "ok"]
