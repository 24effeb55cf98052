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
)

from dspark_json.buffers.arrow import string_buffers, to_string_array
from dspark_json.parse.json.conform import (
    CODE_EXTRA,
    CODE_FITS,
    CODE_INVALID,
    CODE_MISFIT,
    CODE_NULL,
    compile_type,
)
from dspark_json.parse.json.scans import NO_SPARE, scan_envelope_fit

TYPE = StructType(
    [
        StructField("a", LongType()),
        StructField(
            "b",
            ArrayType(StructType([StructField("x", DoubleType()), StructField("s", StringType())])),
        ),
        StructField("c", BooleanType()),
        StructField("i", IntegerType()),
    ]
)
F, X, M, BAD = CODE_FITS, CODE_EXTRA, CODE_MISFIT, CODE_INVALID


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('{"a":1}', F),
        (' { "a" : 1 , "c" : true } ', F),
        ("{}", F),
        ('{"b":[]}', F),
        ('{"b":[null,{}]}', F),
        ('{"b":[{"x":1},{"x":2.5e10,"s":"a\\"b"}]}', F),
        ('{"a": 123456789012345678}', F),
        ('{"c":false,"i":-2147483648}', F),
        ('{"z":null,"a":3}', F),  # an unknown key holding null is nothing to rescue
        ('{"z":1}', X),
        ('{"b":[{"x":1,"y":{"deep":[1]}}]}', X),
        ('{"a":1.0}', M),  # not a whole number
        ('{"a": 1234567890123456789}', M),  # 19 digits: the reference parser checks the range
        ('{"c":true,"i":2147483648}', M),
        ('{"a":"1"}', M),
        ('{"b":{"x":1}}', M),
        ('{"b":[{"x":-0}]}', M),  # Python reads 0.0, Arrow -0.0
        ('{"b":[{"x":1e400}]}', M),
        ('{"a":1,"a":2}', M),
        ('{"b":[{"x":1,"x":2}]}', M),
        ('{"a\\u0061":1}', M),
        ('{"a":1,}', BAD),
        ('{"a":NaN}', BAD),
        ("[1]", BAD),  # valid JSON, but an envelope is an object
        ('{"a":"\\ud800"}', BAD),
        (None, CODE_NULL),
    ],
)
def test_envelope_codes(body, code):
    offsets, data, valid = string_buffers(to_string_array([body]))
    codes, *_ = scan_envelope_fit(
        offsets, data, valid, compile_type(TYPE).nodes, False, True, 0, 1, NO_SPARE
    )
    assert codes.tolist() == [code]


def test_scan_over_row_ranges_matches_one_pass():
    bodies = ['{"a":1}', '{"z":1}', "nope", None, '{"a":"x"}'] * 10
    offsets, data, valid = string_buffers(to_string_array(bodies))
    table = compile_type(TYPE).nodes
    whole = scan_envelope_fit(offsets, data, valid, table, False, True, 0, len(bodies), NO_SPARE)
    parts = [
        scan_envelope_fit(offsets, data, valid, table, False, True, lo, lo + 5, NO_SPARE)
        for lo in range(0, 50, 5)
    ]
    for i, column in enumerate(whole):
        assert column.tolist() == np.concatenate([p[i] for p in parts]).tolist()
    _, _, rows, spans, *_ = whole
    assert rows.tolist() == [i for i in range(50) if i % 5 == 1]  # each '{"z":1}' row
    key, value = spans[0:2], spans[2:4]
    assert data[key[0] : key[1]].tobytes() == b"z" and data[value[0] : value[1]].tobytes() == b"1"


def test_deeper_unknown_keys_are_recorded_with_their_path():
    bodies = ['{"b":[{"x":1},{"x":2,"y":[3]}]}', '{"q":[1]}', '{"b":[{"y":null}]}']
    offsets, data, valid = string_buffers(to_string_array(bodies))
    table = compile_type(TYPE).nodes
    codes, deep, rows, _, _, nested_rows, nested, _ = scan_envelope_fit(
        offsets, data, valid, table, False, True, 0, 3, NO_SPARE
    )
    assert codes.tolist() == [CODE_EXTRA, CODE_EXTRA, CODE_FITS]  # a null value is not extra
    assert deep.tolist() == [False, False, False] and rows.tolist() == [1]
    assert nested_rows.tolist() == [0]
    k0, k1, v0, v1, levels, *path = nested.tolist()
    assert data[k0:k1].tobytes() == b"y" and data[v0:v1].tobytes() == b"[3]"
    b_node = int(table.field_node[int(table.first[0]) + 1])
    assert path[:levels] == [b_node, -2]  # field b, then its element [1]


def test_a_row_with_more_nested_unknown_keys_than_recorded_is_left_to_a_walk():
    deep_value = '{"b":[{"x":1,"y":' + '{"z":' * 9 + "1" + "}" * 9 + "}]}"  # one key
    many = '{"b":[' + ",".join('{"y":1}' for _ in range(40)) + "]}"
    offsets, data, valid = string_buffers(to_string_array([deep_value, many]))
    codes, deep, *_ = scan_envelope_fit(
        offsets, data, valid, compile_type(TYPE).nodes, False, True, 0, 2, NO_SPARE
    )
    assert codes.tolist() == [CODE_EXTRA, CODE_EXTRA] and deep.tolist() == [False, True]


def test_a_long_scan_of_rows_with_the_most_keys_a_row_records_keeps_every_one():
    # The row loop returns to its kernel to grow the kept keys before a row that could
    # overflow them (a row records at most FOUND top-level and 32 deeper keys) and to learn a
    # shape: rows each at those limits, matched to a learnt shape or walked, keep the same keys
    # as each row scanned alone. A room check one key short writes past the kept keys: under
    # NUMBA_BOUNDSCHECK=1 this test fails there with an IndexError (without it, silently).
    from dspark_json.parse.json.conform import FOUND, NESTED_STRIDE

    top = '{"a":%d,' + ",".join(f'"k{j}":[]' for j in range(FOUND)) + "}"
    nested = '{"b":[{"x":%d,' + ",".join(f'"y{j}":{{}}' for j in range(32)) + "}]}"
    one = '{"a":%d,"k0":[],"b":[{"x":1,"y":{}}]}'  # a key of each: the room left no multiple of 64
    # (a row of one key, then two of the most: the second finds 63 places left), then mixed
    kinds = [(one, top, top)[i % 3] for i in range(42)] + [nested] * 40
    kinds += [(top, nested, one)[i % 3] for i in range(60)]
    bodies = [kind % i for i, kind in enumerate(kinds)]
    offsets, data, valid = string_buffers(to_string_array(bodies))
    table = compile_type(TYPE).nodes
    n = len(bodies)
    whole = scan_envelope_fit(offsets, data, valid, table, False, True, 0, n, NO_SPARE)
    alone = [
        scan_envelope_fit(offsets, data, valid, table, False, True, i, i + 1, NO_SPARE)
        for i in range(n)
    ]
    codes, deep, rows, _, _, nested_rows, nested_spans, _ = whole
    assert codes.tolist() == [CODE_EXTRA] * n and not deep.any()
    assert len(rows) == FOUND * kinds.count(top) + kinds.count(one)
    assert len(nested_rows) == 32 * kinds.count(nested) + kinds.count(one)
    for i in (1, 2, 3, 4, 5):  # all but the shape groups (rows alone learn nothing)
        assert whole[i].tolist() == np.concatenate([p[i] for p in alone]).tolist(), i

    def paths(spans):  # each deeper key's spans and the levels of its path (the rest unset)
        keys = spans.reshape(-1, NESTED_STRIDE).tolist()
        return [key[:5] + key[5 : 5 + key[4]] for key in keys]

    assert paths(nested_spans) == paths(np.concatenate([p[6] for p in alone]))
