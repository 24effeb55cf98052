from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from dspark_json.buffers.arrow import string_buffers, to_string_array
from dspark_json.parse.json.conform import (
    CODE_INVALID,
    CODE_NULL,
    compile_type,
    validate_row,
)
from dspark_json.parse.json.grammar import (
    KIND_ARRAY,
    KIND_INVALID,
    KIND_OBJECT,
    KIND_SCALAR,
    MAX_DEPTH,
)
from dspark_json.parse.json.scans import NO_SPARE, scan_envelope_fit

SUITE = Path(__file__).parents[1] / "data" / "jsontestsuite"


def kind(raw: bytes) -> int:
    return validate_row(np.frombuffer(raw, np.uint8), 0, len(raw))


@pytest.mark.parametrize("path", sorted(SUITE.glob("[yn]_*.json")), ids=lambda p: p.name)
def test_json_test_suite_verdicts(path):
    verdict = kind(path.read_bytes())
    if path.name.startswith("y_"):
        assert verdict != KIND_INVALID
    else:
        assert verdict == KIND_INVALID


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"a": [1, -2.5e3, true, null, "\\ud83d\\ude00"]}', KIND_OBJECT),
        (b" [] ", KIND_ARRAY),
        (b'"x"', KIND_SCALAR),
        (b'"\\ud800"', KIND_INVALID),  # a lone surrogate cannot be UTF-8
        (b'"\xed\xa0\x80"', KIND_INVALID),  # nor encoded
        (b"\xef\xbb\xbf{}", KIND_INVALID),  # no byte-order mark
        (b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, KIND_ARRAY),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), KIND_INVALID),
        (b"NaN", KIND_INVALID),
        (b"", KIND_INVALID),
    ],
)
def test_strictness(raw, expected):
    assert kind(raw) == expected


def kinds_of(array):
    offsets, data, valid = string_buffers(array)
    return [
        validate_row(data, offsets[i], offsets[i + 1]) if valid[i] else None
        for i in range(len(array))
    ]


def test_the_buffers_of_a_sliced_array_are_read_in_place():
    array = to_string_array(['{"a": 1}', "nope", None, "[1]", "{}"]).slice(1)
    assert kinds_of(array) == [KIND_INVALID, None, KIND_ARRAY, KIND_OBJECT]
    offsets, data, valid = string_buffers(array)
    table = compile_type(StructType([])).nodes
    codes = scan_envelope_fit(offsets, data, valid, table, False, True, 0, len(array), NO_SPARE)[0]
    assert codes.tolist()[:3] == [CODE_INVALID, CODE_NULL, CODE_INVALID]


def test_bytes_with_invalid_utf8_stay_bytes_for_the_scan():
    array = to_string_array([b'{"a": "\xff"}', '{"a": "ok"}'])
    assert pa.types.is_large_string(array.type)
    assert kinds_of(array) == [KIND_INVALID, KIND_OBJECT]


def test_an_escape_is_found_wherever_it_sits_and_only_in_its_range():
    import random
    import re

    from dspark_json.parse.json.grammar import holds_escape

    rng = random.Random(2)
    pieces = [b"a", b"\\", b'\\"', b"\\u00", b"\\u0063", b"\\u005F", b"\\u00e9", b"\\u0", b"u0063"]
    for _ in range(4_000):
        text = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 14)))
        escapes = [int(m, 16) for m in re.findall(rb"\\u00([0-9a-fA-F]{2})", text)]
        # the reference reads every escape, even one whose backslash is itself escaped
        expected = any(0x5F <= code <= 0x75 for code in escapes)
        assert holds_escape(np.frombuffer(text, np.uint8), 0x5F, 0x75) == expected, text


def test_a_mask_hit_that_is_no_escape_is_not_taken_for_one():
    from dspark_json.parse.json.grammar import holds_escape

    # ']' is a backslash plus one: a borrow can mark it in the mask; it is checked.
    assert not holds_escape(np.frombuffer(b"\\]u0063" + b"x" * 10, np.uint8), 0x5F, 0x75)


def test_events_grow_to_the_projection_but_never_past_what_the_rest_can_write():
    """Long rows first, short ones after (found by a hostile review: the projection of the
    first 64 rows asked for 290 GB); the most the scan can still write caps it."""
    from dspark_json.parse.json.conform import room

    events = np.zeros(3 * 1_000, np.int64)
    grown = room(events, 1_000, 10, 64, 10**9, 5_000)
    assert 3 * 1_010 <= len(grown) <= 3 * 5_000
    assert (grown[: 3 * 1_000] == 0).all()
    assert len(room(events, 1_000, 10, 64, 128, 10**9)) >= 3 * (2_000 + 2_000 // 8)
