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


def _number_verdict(text: bytes, node_kind: int, bits: int) -> tuple[int, bool, int]:
    """The number rule: where the grammar's scan ends the token (-1: not a number), and, from
    its spec, whether it fits (an int: whole, at most 18 digits, in range; a double: not -0
    written as an integer, decimal exponent and integer digits within 300), its int value."""
    import re

    from dspark_json.parse.json.conform import T_INT
    from dspark_json.parse.json.grammar import scan_number

    after = scan_number(np.frombuffer(text, np.uint8), 0, len(text))
    if after < 0:
        return -1, False, 0
    token = re.fullmatch(rb"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", text[:after])
    assert token is not None
    after = token.end()
    whole, fraction, exponent = token.group(1), token.group(2), token.group(3)
    negative = text.startswith(b"-")
    if node_kind == T_INT:
        if fraction or exponent or len(whole) > 18:
            return after, False, 0
        value = int(token.group(0))
        return after, -(2 ** (bits - 1)) <= value < 2 ** (bits - 1), value
    if negative and whole == b"0" and not fraction and not exponent:
        return after, False, 0
    power = int(exponent[1:].lstrip(b"+-") or b"0") if exponent else 0
    sign = -1 if exponent and exponent[1:2] == b"-" else 1
    if power > 300 or len(whole) > 300 or len(whole) + sign * power > 300:
        return after, False, 0
    return after, True, 0


_NUMBER_PIECES = [b"-", b"0", b"7", b"1234567890", b"9" * 17, b".", b"5", b"e", b"E", b"+",
                  b"-", b"301", b"299", b"00", b"x", b",", b" "]  # fmt: skip


@pytest.mark.parametrize("node_kind_name", ["T_INT", "T_DOUBLE"])
def test_a_number_is_scanned_and_fitted_in_one_pass_as_the_rule_says(node_kind_name):
    # scan_fitted_number replaces a scan then a second pass: the same end, verdict and value
    # for every mix of signs, digits, dots and exponents, cut at every length (the buffer's end).
    import random

    from dspark_json.parse.json import conform
    from dspark_json.parse.json.conform import scan_fitted_number

    node_kind = getattr(conform, node_kind_name)
    rng = random.Random(23 + node_kind)
    cases = [b"-0", b"0", b"-", b"1e", b"1.", b"1.e5", b"01", b"-01.5", b"1" * 19, b"9" * 18]
    cases += [b"1234567890e299", b"1234567890e-299", b"1234567890E+299", b"-" + b"9" * 18]
    cases += [b"".join(rng.choices(_NUMBER_PIECES, k=rng.randrange(1, 7))) for _ in range(3000)]
    cases += [b"2147483647", b"-2147483648", b"2147483648", b"-2147483649"]
    for text, bits in ((text, bits) for text in cases for bits in (32, 64)):
        if text[:1] not in (b"-", *(bytes([d]) for d in range(0x30, 0x3A))):
            continue
        for end in range(1, len(text) + 1):
            data = np.frombuffer(text[:end], np.uint8)
            low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
            got = scan_fitted_number(data, 0, end, node_kind, low, high)
            after, fits, value = _number_verdict(text[:end], node_kind, bits)
            assert (got[0], bool(got[1]) if after >= 0 else False) == (after, fits), text[:end]
            if after >= 0 and fits:
                assert got[2] == value, text[:end]
