"""The CPU parser's other paths give the vectorised path's output: a cold process's small batches
(the reference parser without numba), a schema beyond the vectorised reader (no choices column:
the reference parser takes every row), maps in the envelope (the kernels' path), and
``_rescued_data`` rows built in Python (keys deeper down, numbers whose shortest form needs
Python's ``repr``)."""

import json
import random

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType

from dspark_json import response_schema
from dspark_json.parse import warmup
from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.reference import ReferenceParser
from tests.helpers import assert_same_tables

CONTENT = {"type": "object", "properties": {"label": {"type": "string"}}}
SCHEMA = response_schema(response_format=CONTENT)


def chat(*contents, **extra):
    envelope = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": "stop"}
            for i, c in enumerate(contents)
        ],
        **extra,
    }
    return json.dumps(envelope)


BODIES = [
    chat('{"label": "a"}'),
    chat('{"label": "b", "extra": 1}', metadata={"trace": "t"}),
    chat("prose"),
    "{",
    None,
]


@pytest.fixture
def cold(monkeypatch):
    """A process whose kernels are still compiling (and that starts no warm-up thread)."""
    monkeypatch.setattr(warmup, "ready", lambda: False)
    monkeypatch.setattr(warmup, "start", lambda job: None)


def test_a_cold_process_parses_a_small_batch_row_by_row_with_the_same_output(cold):
    warm = CpuParser(SCHEMA).parse_vectorised(BODIES)
    parser = CpuParser(SCHEMA)
    assert parser.parse(BODIES).equals(warm)
    assert parser.reference_rows == len(BODIES)


def test_a_cold_process_does_not_wait_for_a_big_batch_either_way(cold):
    parser = CpuParser(SCHEMA)
    big = [BODIES[0]] * warmup.SMALL_BATCH
    table = parser.parse(big)
    assert parser.reference_rows == 0 and table.num_rows == warmup.SMALL_BATCH
    parser.parse(big[:-1])
    assert parser.reference_rows == warmup.SMALL_BATCH - 1


def _beyond_the_kernels(schema: StructType) -> StructType:
    """``schema`` with a map in the envelope and without its choices column: the reference
    parser's, every row."""
    fields = [f for f in schema.fields if f.name != "choices"]
    fields.insert(1, StructField("labels", MapType(StringType(), StringType())))
    return StructType(fields)


@pytest.mark.parametrize("given", ["binary array", "python list"])
def test_a_schema_beyond_the_kernels_is_parsed_row_by_row_even_with_invalid_utf8(given):
    parser = CpuParser(_beyond_the_kernels(SCHEMA))
    raw = [chat('{"label": "a"}', labels={"k": "v"}).encode(), b'{"id": "\xff']
    bodies = pa.array(raw, pa.binary()) if given == "binary array" else raw
    rows = parser.parse(bodies).to_pylist()
    assert parser.reference_rows == 2
    assert [r["_status"] for r in rows] == ["ok", "corrupt_envelope"]
    assert rows[0]["labels"] == [("k", "v")]
    assert rows[1]["_corrupt_record"] == '{"id": "\ufffd'


def _with_envelope_maps(schema: StructType) -> StructType:
    """``schema`` with maps in the envelope, as a user schema puts them there: at the top level
    (of strings, of maps of integers) and in each choice's message (of arrays)."""
    fields = list(schema.fields)
    fields.insert(1, StructField("labels", MapType(StringType(), StringType())))
    counts = MapType(StringType(), MapType(StringType(), LongType()))
    fields.insert(2, StructField("counts", counts))
    choices = schema["choices"].dataType
    choice = choices.elementType
    message = choice["message"].dataType
    hints = StructField("hints", MapType(StringType(), ArrayType(LongType())))
    message = StructType([*message.fields, hints])
    choice = StructType(
        [StructField("message", message) if f.name == "message" else f for f in choice.fields]
    )
    return StructType(
        [StructField("choices", ArrayType(choice)) if f.name == "choices" else f for f in fields]
    )


def _map_value(rng: random.Random, value) -> object:
    if rng.random() < 0.1:
        return None
    keys = [rng.choice(["a", "b", "app.kubernetes.io/name", "\u00e9"]) for _ in range(3)]
    return {k: value() for k in keys}


@pytest.mark.parametrize("seed", range(3))
def test_maps_in_the_envelope_are_read_on_the_kernels_path(seed):
    """Maps a user schema puts in the envelope: the reference parser's table, and only drift
    (a value of another type, an unknown key under a map) leaves the kernels' path."""
    rng = random.Random(seed)
    schema = _with_envelope_maps(SCHEMA)
    bodies, drifting = [], 0
    for i in range(200):
        drift = rng.random() < 0.05
        labels = _map_value(rng, lambda: rng.choice(["x", "y", ""]))
        counts = _map_value(rng, lambda: _map_value(rng, lambda: rng.choice([1, -2, None])))
        if drift:
            counts = {"a": {"b": "not a number"}}
        envelope = json.loads(chat(*['{"label": "a"}'] * (1 + (i % 4 == 0))))
        for choice in envelope["choices"]:
            choice["message"]["hints"] = _map_value(rng, lambda: [rng.randint(0, 9)])
        envelope |= {"labels": labels, "counts": counts}
        if rng.random() < 0.1:
            envelope["metadata"] = {"trace": f"t{i}"}  # rescued, on the kernels' path
        bodies.append(json.dumps(envelope, indent=rng.choice([None, 1])))
        drifting += drift
    parser = CpuParser(schema)
    ours = parser.parse_vectorised(bodies)
    reference = ReferenceParser(schema).parse(bodies)
    assert_same_tables(ours, reference, bodies)
    assert parser.reference_reasons == ({"envelope_misfit": drifting} if drifting else {})
    assert ours.column("labels").null_count < len(bodies)


@pytest.mark.parametrize(
    "body",
    [
        # numbers whose shortest repr differs from what was written (16-17 digits)
        chat('{"label": "a", "x": 0.12345678901234567, "y": 1.5}'),
        chat('{"label": "a"}', usage_extra=12345678901234567.0),
        chat('{"label": "a", "x": [0.30000000000000004, 1e-7, 123456789012345678.0]}'),
        # keys deeper down: the row is walked
        chat("not json", '{"label": "b", "deep": {"er": 1}}', meta={"x": {"y": [1]}}),
        chat('{"label": "c", "deep": {"er": [1, {"z": 2}]}}', "prose", extra={"k": {"v": 1}}),
        chat('```json\n{"label": "d", "n": {"m": 1}}\n```', meta={"x": {}}),
        # keys deeper down in the envelope only: the content fits and is not read again
        chat('{"label": "e"}', '{"label": "f", "g": 1}', meta={"x": {"y": [1]}}),
    ],
    ids=[
        "17-digits",
        "envelope-number",
        "numbers-in-list",
        "deep-prose",
        "deep-two",
        "fenced",
        "deep-envelope",
    ],
)
def test_rows_rescued_in_python_equal_the_reference(body):
    batch = [chat('{"label": "fits"}'), body, chat('{"label": "z", "more": 2.5}')]
    parser = CpuParser(SCHEMA)
    ours = parser.parse_vectorised(batch)
    assert parser.reference_rows == 0  # the rescue is Python's, the row stays vectorised
    reference = ReferenceParser(SCHEMA).parse(batch)
    assert ours.column("_rescued_data").to_pylist() == reference.column("_rescued_data").to_pylist()
    assert ours.equals(reference)


def _top_level_parsed_only(schema: StructType) -> StructType:
    """``schema`` with ``parsed`` at the top level only: what users write by hand."""
    choices = schema["choices"].dataType
    choice = choices.elementType
    message = choice["message"].dataType
    bare = StructType([f for f in message.fields if f.name != "parsed"])
    choice = StructType(
        [StructField(f.name, bare) if f.name == "message" else f for f in choice.fields]
    )
    return StructType(
        [
            StructField(f.name, type(choices)(choice)) if f.name == "choices" else f
            for f in schema.fields
        ]
    )


def test_a_schema_with_parsed_only_at_the_top_level_stays_vectorised():
    """A hand-written schema (``parsed`` at the top level, none in the messages) was parsed
    row by row, far slower than the envelope's own schema."""
    schema = _top_level_parsed_only(SCHEMA)
    two_choices = chat('{"label": "x"}', '{"label": "y", "more": 1}')
    undeclared = json.loads(chat('{"label": "t"}'))
    undeclared["choices"][0]["message"]["annotations"] = []  # deeper than the top: walked
    batch = [*BODIES, two_choices, chat('```json\n{"label": "f"}\n```'), json.dumps(undeclared)]
    parser = CpuParser(schema)
    ours = parser.parse_vectorised(batch)
    # the second choice's value has no column: that row is the reference's, to rescue it
    assert parser.reference_rows == 1
    reference = ReferenceParser(schema).parse(batch)
    assert ours.equals(reference)
    assert ours.column("parsed").to_pylist()[-2:] == [{"label": "f"}, {"label": "t"}]
    assert "choices[1].message.parsed" in ours.column("_rescued_data")[5].as_py()
    assert ours.column("_rescued_data")[7].as_py() == '{"choices[0].message.annotations":[]}'
    assert parser.reference_rows == 1  # a walk in Python, but the row stays vectorised


def test_the_reference_parsers_rows_are_counted_by_reason(cold):
    """Each row the reference parser takes is counted once, under why it went there."""
    parser = CpuParser(SCHEMA)
    parser.parse(BODIES)  # a small batch while the kernels compile
    assert parser.reference_reasons == {"kernels_compiling": len(BODIES)}
    drift = [
        chat('{"label": "a", "label": "b"}'),  # a repeated key: the content does not fit
        chat('{"label": "a"}', created="yesterday"),  # the envelope does not fit
        chat('{"label": "a"}', '{"label": "b"}'),  # fits: the second choice has a column
    ]
    table = parser.parse_vectorised(BODIES + drift)
    assert table.equals(ReferenceParser(SCHEMA).parse(BODIES + drift))
    assert parser.reference_reasons == {"envelope_misfit": 1, "content_misfit": 1}
    assert parser.reference_rows == sum(parser.reference_reasons.values())
    top = CpuParser(_top_level_parsed_only(SCHEMA))
    top.parse_vectorised(BODIES + drift)
    assert top.reference_reasons["extra_choices"] == 1


def test_a_schema_beyond_the_kernels_counts_every_row_under_column_types():
    parser = CpuParser(_beyond_the_kernels(SCHEMA))
    parser.parse_vectorised(BODIES)
    assert parser.reference_reasons == {"column_types": len(BODIES)}
    parser.parse_vectorised([])
    assert parser.reference_reasons == {} and parser.reference_rows == 0


def test_the_partition_log_line_and_record_say_why_rows_took_the_reference_parser(caplog):
    import logging

    from dspark_json.metrics import report

    record = {
        "batch": None, "partition": 0, "prompts": 3, "source": "server", "rows": {"ok": 3},
        "dropped": 0, "http_seconds": 0.0, "requests": 3, "retries": 0, "http_status": {},
        "latency_ms": {"p50": None, "p95": None, "p99": None},
        "inflight_limit": {"lowest": 1, "peak": 1}, "prompt_tokens": 0,
        "completion_tokens": 0, "parse_seconds": 0.0, "backend": "cpu", "reference_rows": 3,
        "reference_reasons": {"content_misfit": 2, "envelope_misfit": 1}, "rescued_rows": 0,
        "error_rows": 0, "new_fields": [],
    }  # fmt: skip
    with caplog.at_level(logging.INFO, logger="dspark_json"):
        report(record, "partition 0", None)
    assert "3 row(s) by the reference parser: content_misfit 2, envelope_misfit 1" in caplog.text


def test_a_schema_without_rescued_data_gathers_no_unknown_keys(monkeypatch):
    """A pruned schema without ``_rescued_data``: the unknown keys are skipped (no rescue
    built), and every other column is the full schema's."""
    from dspark_json.parse.rescued import Rescued

    pruned = StructType([f for f in SCHEMA.fields if f.name != "_rescued_data"])
    full = CpuParser(SCHEMA).parse_vectorised(BODIES)

    def refused(*args, **kwargs):
        raise AssertionError("rescued data built for a schema without _rescued_data")

    monkeypatch.setattr(Rescued, "column", refused)
    table = CpuParser(pruned).parse_vectorised(BODIES)
    assert table.equals(full.drop_columns(["_rescued_data"]))
