"""Shapes (parse/json/shapes.py): a row that repeats the shape of a row before it is matched byte
for byte instead of walked, with the same codes, events and unknown keys as the walk."""

import json
import random

import numpy as np
import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.buffers.arrow import string_buffers, to_string_array
from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.json.conform import (
    CODE_EXTRA,
    CODE_FITS,
    FOUND,
    NESTED_STRIDE,
    Found,
    compile_type,
)
from dspark_json.parse.json.scans import NO_SPARE, scan_envelope_fit
from dspark_json.parse.json.shapes import learn_shape, match_shape
from dspark_json.parse.reference import ReferenceParser

TYPE = StructType(
    [
        StructField("id", StringType()),
        StructField("created", TimestampType()),
        StructField("n", IntegerType()),
        StructField("x", DoubleType()),
        StructField("ok", BooleanType()),
        StructField(
            "choices",
            ArrayType(
                StructType(
                    [
                        StructField("index", LongType()),
                        StructField("text", StringType()),
                        StructField("tags", ArrayType(StringType())),
                    ]
                )
            ),
        ),
        StructField("usage", StructType([StructField("tokens", LongType())])),
    ]
)
SECONDS = (-(2**40), 2**40)

BASE = {
    "id": "chatcmpl-1",
    "created": 1764374405,
    "n": 7,
    "x": 0.25,
    "ok": True,
    "choices": [{"index": 0, "text": 'a "quoted" é 😀 \\ text', "tags": ["a", "b"]}],
    "usage": {"tokens": 12},
    "unknown": None,
}

#: Values a slot may hold in a later row: of the same kind or not, fitting or not, valid or not.
VALUES = [
    '"x"', '""', '"\\u00e9\\ud83d\\ude00"', '"\\ud800"', '"a\\qb"', '"\x01"', '"\xff"',
    "0", "-1", "12345678901234567", "123456789012345678901", "2147483648", "-0", "1.5",
    "1e400", "-2.5E-3", "01", "1.", "-", "true", "false", "null", "nul", "{}", "[]", '{"k":1}',
]  # fmt: skip


def _scan(bodies, table, shapes):
    offsets, data, valid = string_buffers(to_string_array(bodies))
    return scan_envelope_fit(
        offsets, data, valid, table.nodes, False, shapes, 0, len(bodies), NO_SPARE
    )


def _meant(scan):
    """A scan's results, the unused path entries of nested keys (scratch) left out, and which
    rows repeat another's keys (the walk does not tell) left out."""
    *head, nested, _ = scan
    entries = nested.reshape(-1, NESTED_STRIDE).copy()
    for entry in entries:
        entry[5 + entry[4] :] = 0
    return [*head, entries]


def _same_scans(bodies, table):
    walked = _meant(_scan(bodies, table, False))
    shaped = _meant(_scan(bodies, table, True))
    for a, b in zip(walked, shaped, strict=True):
        np.testing.assert_array_equal(a, b)


def _mutate(rng, text):
    """The base row with one value, one key or one byte changed."""
    choice = rng.randrange(6)
    tokens = [m for m in range(len(text)) if text[m] in '":,{}[ 0123456789tfn']
    at = rng.choice(tokens)
    if choice == 0:  # a value replaced where one starts
        starts = [m for m in range(1, len(text)) if text[m - 1] in ":[," and text[m] != " "]
        at = rng.choice(starts)
        end = at
        depth = 0
        in_string = False
        while end < len(text):
            c = text[end]
            if in_string:
                if c == "\\":
                    end += 1
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "[{":
                depth += 1
            elif c in "]}":
                if depth == 0:
                    break
                depth -= 1
            elif c == "," and depth == 0:
                break
            end += 1
        return text[:at] + rng.choice(VALUES) + text[end:]
    if choice == 1:  # a byte dropped
        return text[:at] + text[at + 1 :]
    if choice == 2:  # whitespace added
        return text[:at] + " " + text[at:]
    if choice == 3:  # an extra key, with or without a value
        return text[:-1] + rng.choice([', "z": 1}', ', "z": null}', ', "id": "again"}'])
    if choice == 4:  # cut short
        return text[: rng.randrange(len(text))]
    return text + rng.choice(["", " ", "\n", "x", "}"])


@pytest.mark.parametrize("seed", range(8))
def test_shaped_scan_equals_the_walk_row_by_row(seed):
    rng = random.Random(seed)
    base = json.dumps(BASE, ensure_ascii=seed % 2 == 0)
    table = compile_type(TYPE, timestamp_range=SECONDS)
    bodies = []
    for _ in range(400):
        row = dict(BASE, id=f"chatcmpl-{rng.randrange(10**6)}", n=rng.randrange(-5, 10**6))
        row["choices"] = [dict(BASE["choices"][0], text="t" * rng.randrange(40))]
        text = json.dumps(row, ensure_ascii=seed % 2 == 0)
        bodies.append(text if rng.random() < 0.5 else _mutate(rng, base))
    _same_scans(bodies, table)
    # Row by row against the base row's shape: a row matches only where the walk finds that
    # it fits, and then with the walk's events.
    shape = _learnt(base, table)
    matched = 0
    for body in bodies:
        events = _match(body, shape, table)
        if events is not None:
            walked = _scan([body], table, False)
            assert walked[0].tolist() == [CODE_FITS], body
            np.testing.assert_array_equal(events, walked[4])
            matched += 1
    assert matched > 100


def test_extra_keys_are_recorded_the_same_among_shaped_rows():
    table = compile_type(TYPE, timestamp_range=SECONDS)
    plain = [json.dumps(dict(BASE, id=str(i))) for i in range(50)]
    extra = [json.dumps(dict(BASE, id=str(i), z=[i])) for i in range(5)]
    deeper = [json.dumps(dict(BASE, usage={"tokens": 1, "w": i})) for i in range(5)]
    bodies = plain[:20] + extra + plain[20:40] + deeper + plain[40:]
    walked = _scan(bodies, table, False)
    assert len(walked[2]) == 5 and len(walked[5]) == 5
    _same_scans(bodies, table)


def test_rows_that_change_shape_midway_scan_as_walked():
    table = compile_type(TYPE, timestamp_range=SECONDS)
    first = [json.dumps({"id": str(i), "n": i}) for i in range(20)]
    then = [json.dumps({"n": i, "id": str(i), "ok": False}) for i in range(30)]
    _same_scans(first + then + first, table)


def _learnt(body, table):
    offsets, data, _ = string_buffers(to_string_array([body]))
    walked = _scan([body], table, False)
    assert walked[0].tolist() in ([CODE_FITS], [CODE_EXTRA])
    events = walked[4]
    learnt, shape = learn_shape(
        data, 0, offsets[1], events, 0, len(events) // 3, table.nodes.kind, _found_of(walked)
    )
    assert learnt
    return shape


def _found_of(scan):
    """A one-row scan's unknown keys as check_row records them (its scratch layout)."""
    spans, nested = scan[3], scan[6]
    found = np.zeros(4 * FOUND + len(nested) + NESTED_STRIDE, np.int64)
    found[: len(spans)] = spans
    found[4 * FOUND : 4 * FOUND + len(nested)] = nested
    return Found(found, np.array([len(spans) // 4, len(nested) // NESTED_STRIDE], np.int64))


def _match(body, shape, table):
    offsets, data, _ = string_buffers(to_string_array([body]))
    events = np.zeros(3 * 64, np.int64)
    seg_pos = np.zeros(len(shape.segments), np.int64)
    n = match_shape(data, 0, offsets[1], shape, table.nodes, events, 0, seg_pos)
    return events[: 3 * n] if n >= 0 else None


def test_a_shape_keeps_the_bytes_outside_the_values():
    table = compile_type(TYPE, timestamp_range=SECONDS)
    shape = _learnt('{"id": "a", "n": 1, "ok": true, "unknown": null}', table)
    assert bytes(shape.static) == b'{"id": , "n": , "ok": , "unknown": null}'
    # The same keys with other values: matched, with the events the walk writes.
    other = '{"id": "bcd", "n": -20, "ok": false, "unknown": null}'
    np.testing.assert_array_equal(_match(other, shape, table), _scan([other], table, False)[4])
    # A value of another kind, a null for a value, other whitespace, another key: not matched.
    for body in [
        '{"id": 1, "n": 1, "ok": true, "unknown": null}',
        '{"id": null, "n": 1, "ok": true, "unknown": null}',
        '{"id":"a", "n": 1, "ok": true, "unknown": null}',
        '{"id": "a", "n": 1, "ok": true, "unknown": 2}',
        '{"id": "a", "n": 2147483648, "ok": true, "unknown": null}',
        '{"id": "a", "n": 1, "ok": true, "unknown": null} x',
    ]:
        assert _match(body, shape, table) is None, body


def test_parsed_output_with_shapes_equals_the_reference_parser():
    """End to end on a parser's schema: many rows of one shape, some of them odd."""
    schema = StructType(
        [StructField(f.name, f.dataType) for f in TYPE.fields]
        + [StructField(n, StringType()) for n in ("_status", "_rescued_data", "_corrupt_record")]
    )
    rng = random.Random(7)
    base = json.dumps(BASE)
    bodies = [base.replace('"chatcmpl-1"', f'"c{i}"') for i in range(300)]
    bodies += [_mutate(rng, base) for _ in range(100)]
    rng.shuffle(bodies)
    got = CpuParser(schema).parse_vectorised(bodies)
    want = ReferenceParser(schema).parse(bodies)
    assert repr(got.to_pylist()) == repr(want.to_pylist())


#: Unknown keys whose values are static (no string, number or boolean in them): rows that hold
#: them are learnt and matched too, and record the keys at their own positions.
STATIC_EXTRAS = [
    {"z": []},
    {"z": {}, "w": [[], {}]},
    {"usage": {"tokens": 3, "w": []}},
    {"choices": [{"index": 0, "text": "t", "tags": [], "tool_calls": []}]},
    {"choices": [{"index": 0, "tool_calls": [], "text": "t"}, {"index": 1, "more": {}}]},
]


@pytest.mark.parametrize("extra", STATIC_EXTRAS)
@pytest.mark.parametrize("seed", range(4))
def test_rows_with_static_unknown_keys_match_and_record_them_as_the_walk(extra, seed):
    rng = random.Random(seed)
    table = compile_type(TYPE, timestamp_range=SECONDS)
    base = json.dumps(dict(BASE, **extra), ensure_ascii=seed % 2 == 0)
    bodies = []
    for i in range(300):
        row = dict(BASE, **extra, id=f"chatcmpl-{rng.randrange(10**6)}", n=rng.randrange(10**6))
        text = json.dumps(row, ensure_ascii=seed % 2 == 0)
        roll = rng.random()
        bodies.append(
            text
            if roll < 0.6
            else _mutate(rng, base)
            if roll < 0.9
            else json.dumps(dict(BASE, id=str(i)))
        )
    _same_scans(bodies, table)
    walked = _scan(bodies, table, False)
    assert (walked[0] == CODE_EXTRA).sum() > 150  # most rows record their keys
    # The shape of such a row keeps its keys; a row that matches it records them at its own
    # positions, the walk's.
    shape = _learnt(base, table)
    assert len(shape.top) + len(shape.nested) > 0
    matched = 0
    for body in bodies[:80]:
        if _match(body, shape, table) is not None:
            matched += 1
    assert matched > 20


def test_unknown_keys_with_values_in_them_are_not_learnt():
    table = compile_type(TYPE, timestamp_range=SECONDS)
    for extra in ({"z": [1]}, {"z": {"k": "v"}}, {"usage": {"tokens": 1, "w": True}}):
        body = json.dumps(dict(BASE, **extra))
        offsets, data, _ = string_buffers(to_string_array([body]))
        walked = _scan([body], table, False)
        assert walked[0].tolist() == [CODE_EXTRA]
        events = walked[4]
        learnt, _ = learn_shape(
            data, 0, offsets[1], events, 0, len(events) // 3, table.nodes.kind, _found_of(walked)
        )
        assert not learnt, body


def _keys_by_row(scan, data):
    """Each row's recorded unknown keys as bytes: (key, value, path) in the scan's order."""
    _, _, rows, spans, _, nested_rows, nested, _ = scan
    out = {}
    for row, (k0, k1, v0, v1) in zip(rows.tolist(), spans.reshape(-1, 4).tolist(), strict=True):
        out.setdefault(row, []).append((data[k0:k1].tobytes(), data[v0:v1].tobytes(), ()))
    for row, e in zip(
        nested_rows.tolist(), nested.reshape(-1, NESTED_STRIDE).tolist(), strict=True
    ):
        key = (data[e[0] : e[1]].tobytes(), data[e[2] : e[3]].tobytes(), tuple(e[5 : 5 + e[4]]))
        out.setdefault(row, []).append(key)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_rows_grouped_by_repeats_keys_of_hold_the_same_unknown_keys(seed):
    rng = random.Random(seed)
    table = compile_type(TYPE, timestamp_range=SECONDS)
    bodies = []
    for run in range(20):  # runs of 20 rows with one kind of unknown keys
        extra = rng.choice([*STATIC_EXTRAS[:4], {}, {"z": [1]}])
        for i in range(20):
            row = dict(BASE, **extra, id=f"c-{run}-{i}", n=rng.randrange(10**6))
            text = json.dumps(row)
            bodies.append(text if rng.random() < 0.9 else _mutate(rng, text))
    _, data, _ = string_buffers(to_string_array(bodies))
    scan = _scan(bodies, table, True)
    groups, keys = scan[7], _keys_by_row(scan, data)
    grouped = np.flatnonzero(groups >= 0)
    assert len(grouped) > 60  # shapes with static unknown keys were learnt and matched
    for i in grouped.tolist():
        g = int(groups[i])
        assert keys.get(i) and keys.get(i) == keys.get(g), (bodies[i], bodies[g])
    # Rows that record keys no shape holds (values inside) are in no group.
    assert all(groups[i] < 0 for i, b in enumerate(bodies) if '"z": [1]' in b)


def test_a_shape_replays_a_null_struct_as_one_event():
    """A shape learnt from a row with a null struct and a missing one keeps one event for each
    (what is below them is the reader's to expand); the rows that match it read as the
    reference parser reads them, beside rows whose structs are filled."""
    table = compile_type(TYPE, timestamp_range=SECONDS)
    usage, choices = table.fields[0]["usage"], table.fields[0]["choices"]
    missing = {k: v for k, v in BASE.items() if k != "choices"}
    shape = _learnt(json.dumps(dict(missing, usage=None)), table)
    nulls = [e for e in shape.events.reshape(-1, 3).tolist() if e[1] == -1]
    assert nulls == [[usage, -1, 0], [choices, -1, 0]]  # in document order
    bodies = []
    for i in range(120):
        row = dict(missing if i % 4 else BASE, id=f"c{i}")
        if i % 5:
            row["usage"] = None
        bodies.append(json.dumps(row))
    _same_scans(bodies, table)
    schema = StructType(
        [StructField(f.name, f.dataType) for f in TYPE.fields]
        + [StructField(n, StringType()) for n in ("_status", "_rescued_data", "_corrupt_record")]
    )
    parser = CpuParser(schema)
    got = parser.parse_vectorised(bodies)
    assert parser.reference_rows == 0
    assert repr(got.to_pylist()) == repr(ReferenceParser(schema).parse(bodies).to_pylist())
