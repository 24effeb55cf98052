"""Hostile differential tests of the CPU parser's event decoder (conform.check_row shredding +
decode.read_events) against the reference parser."""

import json

import numpy as np
import pytest
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.inputs import recorded
from dspark_json.inputs.listing import Segment
from dspark_json.inputs.recorded import _recorded, read_recorded
from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.reference import ReferenceParser

SYS = [StructField(n, StringType()) for n in ("_status", "_rescued_data", "_corrupt_record")]


def _schema(parsed):
    message = StructType(
        [StructField("role", StringType()), StructField("content", StringType()),
         StructField("parsed", parsed)]
    )  # fmt: skip
    choice = StructType(
        [StructField("index", LongType()), StructField("message", message),
         StructField("finish_reason", StringType())]
    )  # fmt: skip
    return StructType(
        [StructField("id", StringType()), StructField("created", TimestampType()),
         StructField("choices", ArrayType(choice)), StructField("parsed", parsed), *SYS]
    )  # fmt: skip


def _body(content):
    choice = {"index": 0, "message": {"role": "assistant", "content": content},
              "finish_reason": "stop"}  # fmt: skip
    return json.dumps({"id": "c", "created": 1, "choices": [choice]})


def _same(schema, bodies):
    got = CpuParser(schema).parse_vectorised(bodies)
    want = ReferenceParser(schema).parse(bodies)
    assert repr(got.to_pylist()) == repr(want.to_pylist())


@pytest.mark.parametrize(
    "number", ["10000000000e300", "99999999999999999999e290", "-426941803549182921.10e298"]
)
def test_doubles_that_overflow_are_not_inf(number):
    """Found by a hostile review: digits and exponent were bounded apart, so 1e10 * 1e300
    fitted and read as inf; the reference rescues the text and leaves the column null."""
    schema = _schema(StructType([StructField("x", DoubleType())]))
    _same(schema, [_body('{"x": ' + number + "}")])


@pytest.mark.parametrize(
    ("column", "body"),
    [(ArrayType(StructType([])), '{"c": [{}], "d": 1}'), (StructType([]), '{"c": {}, "d": 1}')],
)
def test_empty_struct_types_keep_their_rows(column, body):
    """Found by a hostile review: a struct type without fields lost its rows in the decoder."""
    schema = StructType([StructField("c", column), StructField("d", LongType()), *SYS])
    _same(schema, [body])


@pytest.mark.parametrize(
    "number",
    ["-0e0", "-0.0", "0e999", "1E5", "0.1e-7", "1e-400", "0." + "0" * 400 + "1",
     "123456789012345678901234567890", "9" * 300, "1.7976931348623157e308",
     "4.9406564584124654e-324", "2.4703282292062328e-324", "9007199254740993"],
)  # fmt: skip
def test_doubles_of_every_shape_match_the_reference(number):
    schema = _schema(StructType([StructField("x", DoubleType())]))
    _same(schema, [_body('{"x": ' + number + "}")])


def test_escapes_and_deep_unknown_values_match_the_reference():
    schema = StructType([StructField("a", LongType()), StructField("s", StringType()), *SYS])
    bodies = [
        '{"s":"\\ud83d\\ude00\\u00e9\\uFFFF\\u0000x", "a": -9223372036854775808}',
        '{"s":"\\udbff\\udfff"}', '{"s":"\\ud83d"}', '{"s":"\\ud83d\\u0041"}',
        b'{"s":"\xed\xa0\x80"}', b'{"s":"\xc0\x80"}', b"\xef\xbb\xbf{\"a\":1}",
        *('{"a":1,"z":' + "[" * d + "]" * d + "}" for d in (510, 511, 512)),
    ]  # fmt: skip
    _same(schema, bodies)


def test_a_batch_line_with_an_escaped_custom_id_key_is_a_batch_line(tmp_path):
    """Found by a hostile review: the byte search for the key missed its escaped spelling."""
    line = rb'{"\u0063ustom_id": "r1", "response": {"status_code": 200, "body": {"id": "x"}}}'
    (tmp_path / "r.jsonl").write_bytes(line + b"\n")
    rows, outcomes = read_recorded([Segment(str(tmp_path / "r.jsonl"), 0, 1)])
    assert (rows.custom_ids[0], outcomes[0]) == _recorded(line.decode())
    assert rows.custom_ids == ["r1"] and outcomes[0].body == '{"id": "x"}'


@pytest.mark.parametrize(
    "key",
    [b"custom_id", rb"\u0063ustom_id", rb"custom\u005Fid", rb"custom_i\u0064"],
    ids=["plain", "escaped c", "escaped _", "escaped d"],
)
def test_batch_lines_are_found_in_any_file_at_any_place(tmp_path, key):
    """The whole-file search that lets plain bodies skip the per-row one: a batch line among
    raw bodies, in the second file only, as the very last bytes (no newline after it)."""
    body = '{"id": "plain", "choices": []}'
    batch = b'{"' + key + b'": "r9", "response": {"status_code": 200, "body": {"id": "x"}}}'
    (tmp_path / "a.jsonl").write_text((body + "\n") * 3)
    (tmp_path / "b.jsonl").write_bytes((body + "\n").encode() * 2 + batch)
    segments = [Segment(str(tmp_path / "a.jsonl"), 0, 3), Segment(str(tmp_path / "b.jsonl"), 0, 3)]
    rows, outcomes = read_recorded(segments)
    assert rows.custom_ids == [None] * 5 + ["r9"]
    assert [outcomes[i].body for i in range(6)] == [body] * 5 + ['{"id": "x"}']
    # and a file of plain bodies that merely say the word in their content is no batch file
    (tmp_path / "c.jsonl").write_text('{"id": "c", "note": "custom_id \\u0063"}\n')
    rows, _ = read_recorded([Segment(str(tmp_path / "c.jsonl"), 0, 1)])
    assert rows.custom_ids == [None]


def test_the_whole_segment_prefilters_find_the_key_anywhere_and_nothing_else():
    """What lets a file of plain bodies skip the row-by-row search: both prefilters say no to
    it, and yes to the key (plain, or with an escaped letter) wherever it is: at every offset
    of a 64-byte block, across two blocks, and in the tail a block scan leaves."""

    def holds(text: bytes) -> bool:
        data = np.frombuffer(text, np.uint8)
        return recorded._holds(data, recorded._KEY_BYTES) or recorded._holds_escaped_letter(data)

    plain = b'{"id": "x", "choices": [{"message": {"content": "caf\\u00e9 custom_i"}}]}'
    assert not holds(plain) and not holds(b"") and not holds(b"custom_i") and not holds(b"\\u004")
    assert not holds(plain * 9) and not holds(b"\\u0041" * 40) and not holds(b"custom_ic" * 30)
    for key in (b"custom_id", rb"\u0063", rb"\u005F", rb"\u006d", rb"\u0074"):
        assert holds(key) and holds(plain + key) and holds(key + plain), key
        for at in range(0, 140, 3):
            text = (plain * 3)[:at] + key + (plain * 3)[at:]
            assert holds(text), (key, at)
            assert not holds(text.replace(key, key[:-1] + b"_")), (key, at)
    assert holds(plain[:30] + b"custom_id" + plain[30:])


def test_deep_unknown_keys_without_a_top_level_parsed_column():
    """Found by a hostile review: the walk for deep unknown keys put a top-level ``parsed`` into
    ``_rescued_data`` of a schema that has none."""
    parsed = StructType([StructField("b", StructType([StructField("a", LongType())]))])
    schema = _schema(parsed)
    schema = StructType([f for f in schema.fields if f.name != "parsed"])
    _same(schema, [_body('{"b": {"zz": 1}}'), _body('{"b": {"a": 2}}')])


@pytest.mark.parametrize(
    "schema",
    [
        StructType([StructField("id", StringType()), *SYS]),  # no choices column
        StructType(SYS),  # the system columns alone
    ],
)
def test_schemas_without_choices_match_the_reference(schema):
    """Found by a hostile review: without a choices column the status was "empty" for a body
    with choices, and a schema of system columns alone crashed."""
    _same(schema, ['{"id": "a", "choices": [{}]}', "{}", '{"id": "b"}', "nope"])


def test_escaped_keys_and_names_with_a_backslash_match_the_reference():
    """The scan compares keys as written: a key with an escape, and a column whose name holds
    a backslash (only an escaped key can name it), are the reference parser's to decide."""
    schema = StructType(
        [StructField("a", LongType()), StructField("b\\c", LongType()), *SYS]
    )  # fmt: skip
    bodies = ['{"\\u0061": 1}', '{"b\\\\c": 2}', '{"a": 3, "b\\\\c": 4}', '{"b\\c": 5}', '{"a": 6}']
    _same(schema, bodies)
    parser = CpuParser(schema)
    rows = parser.parse_vectorised(bodies).to_pylist()
    assert [r["a"] for r in rows] == [1, None, 3, None, 6]
    assert [r["b\\c"] for r in rows] == [None, 2, 4, None, None]


def _with_extras(rng, value, depth=0):
    """``value`` with unknown keys put in its objects at random, holding every kind of value."""
    extras = [1, 2.5, "s", [1, {"k": 1}], {"n": {"m": [2]}}, True, None, []]
    if isinstance(value, dict):
        out = {k: _with_extras(rng, v, depth + 1) for k, v in value.items()}
        for _ in range(rng.choice([0, 0, 1, 2])):
            items = list(out.items())
            items.insert(rng.randint(0, len(items)), (f"x{rng.randint(0, 9)}", rng.choice(extras)))
            out = dict(items)
        return out
    if isinstance(value, list):
        return [_with_extras(rng, v, depth + 1) for v in value]
    return value


@pytest.mark.parametrize("seed", range(12))
def test_unknown_keys_at_every_depth_are_rescued_as_the_reference_does(seed):
    """Unknown keys deeper than the top level are recorded with their path by the scans and
    put in ``_rescued_data`` in the reference's order (a depth-first walk of the schema)."""
    import random

    rng = random.Random(seed)
    item = StructType([StructField("name", StringType()), StructField("w", DoubleType())])
    parsed = StructType(
        [StructField("label", StringType()), StructField("items", ArrayType(item)),
         StructField("inner", StructType([StructField("z", LongType())]))]
    )  # fmt: skip
    schema = _schema(parsed)
    if seed % 3 == 1:  # parsed at the top level only
        schema = StructType(
            [f for f in schema.fields if f.name != "choices"]
            + [StructField("choices", ArrayType(StructType([
                StructField("index", LongType()), StructField("finish_reason", StringType()),
                StructField("message", StructType([
                    StructField("content", StringType()), StructField("role", StringType())])),
            ])))]
        )  # fmt: skip
    elif seed % 3 == 2:  # parsed in the messages only
        schema = StructType([f for f in schema.fields if f.name != "parsed"])
    bodies = []
    for _ in range(60):
        content = {
            "label": "a",
            "items": [{"name": "n", "w": 0.5} for _ in range(rng.randint(0, 3))],
            "inner": {"z": 1},
        }
        content = _with_extras(rng, content)
        choices = [
            {"index": k, "message": {"role": "assistant", "content": json.dumps(content)},
             "finish_reason": "stop"}
            for k in range(rng.choice([1, 1, 2]))
        ]  # fmt: skip
        envelope = _with_extras(rng, {"id": "c", "created": 1, "choices": choices})
        bodies.append(json.dumps(envelope))
    _same(schema, bodies)


BATCH_LINES = [
    {"id": "b1", "custom_id": "r1", "response": {"status_code": 200, "body": {"id": "x"}}},
    {"custom_id": "r2", "response": {"status_code": 200, "request_id": "q", "body": {"a": [1]}},
     "error": None},
    {"custom_id": "r3", "response": {"body": {"é": "\u2028"}, "status_code": 200}, "error": None},
    {"custom_id": "r4", "response": {"status_code": 500, "body": {"error": {"message": "m"}}}},
    {"custom_id": "r5", "response": None, "error": {"message": "expired", "code": "x"}},
    {"custom_id": "r6", "response": {"status_code": 200, "body": "{\"id\": \"s\"}"}},
    {"custom_id": "r7", "response": {"status_code": 200, "body": None}},
    {"custom_id": "r8", "response": {"status_code": 200}},
    {"custom_id": 9, "response": {"status_code": 200, "body": {"id": "n"}}},
    {"custom_id": None, "response": {"status_code": 200, "body": {"id": "none"}}},
    {"custom_id": "r11", "response": {"status_code": 200, "body": [1, 2]}},
    {"custom_id": "r12", "response": {"status_code": 200.0, "body": {"id": "f"}}},
    {"custom_id": "r13", "response": {"status_code": 200, "body": {"n": 1e300, "b": True}}},
    {"custom_id": "r14"},
    {"custom_id": "r15", "error": None},
]  # fmt: skip


def test_batch_lines_read_by_the_scan_equal_those_read_in_python(tmp_path):
    """Batch lines in the plain case (status 200, no error, an object body) are read by one
    compiled scan, their body taken as written; every line still means what the Python reading
    (the definition) says: the same custom_id, the same body JSON, the same error."""
    lines = [json.dumps(line) for line in BATCH_LINES]
    lines += [
        '{"custom_id": "d", "response": {"status_code": 200, "body": {"v": 1}, "body": {"v": 2}}}',
        '{"custom_id": "w",  "response" : { "body" : {"v": 3}  ,"status_code":200 } }',
        '{"custom_id": "cut", "response": {"status_code": 200, "body": {"v"',
        '{"\\u0063ustom_id": "esc", "response": {"status_code": 200, "body": {"v": 4}}}',
        '{"custom_id": "s\\u00e9", "response": {"status_code": 200, "body": {"v": 5}}}',
        json.dumps({"id": "raw", "choices": [], "note": "custom_id in a raw body"}),
        json.dumps({"note": "custom_id", "response": {"status_code": 200, "body": {"v": 6}}}),
    ]
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    rows, outcomes = read_recorded([Segment(str(tmp_path / "r.jsonl"), 0, len(lines))])
    for i, line in enumerate(lines):
        custom_id, want = _recorded(line)
        got = outcomes[i]
        assert rows.custom_ids[i] == custom_id, line
        assert got.error == want.error, line
        if want.body is None:
            assert got.body is None, line
        else:
            try:
                assert json.loads(got.body) == json.loads(want.body), line
            except ValueError:
                assert got.body == want.body, line
