"""The word- and block-at-a-time pieces (:mod:`dspark_json.buffers.words`) and the scans built on
them, held to byte-by-byte definitions at every alignment: a mask's lowest bit, a block's masks
and escapes, a string's end, an unescaped string and what it may overwrite, two runs of bytes
compared, a needle found."""

import json
import random

import numpy as np
import pytest
from numba import njit

from dspark_json.buffers.words import (
    BLOCK,
    WORD,
    backslashes,
    block_below,
    block_equal,
    block_high,
    copy_block,
    escaped_bytes,
    first_byte,
    leading_zeros,
    load_word,
    lowest_bit,
    store_word,
    string_stops,
    unicode_escapes,
)
from dspark_json.parse.json.decode import ROOM_AFTER, _unescape_into
from dspark_json.parse.json.grammar import holds_bytes, holds_escape, same_run, scan_string
from dspark_json.response.rules import loads_python


@njit
def _stops(word, lenient):
    mask = string_stops(word, lenient)
    return first_byte(mask) if mask else WORD


@njit
def _backslash(word):
    mask = backslashes(word)
    return first_byte(mask) if mask else WORD


@njit
def _unicode(word):
    return unicode_escapes(word)


@njit
def _load(data, pos):
    return load_word(data, pos)


@njit
def _store(data, pos, word):
    store_word(data, pos, word)


@njit
def _blocks(data, pos, byte):
    return block_equal(data, pos, byte), block_below(data, pos, byte), block_high(data, pos)


@njit
def _copy(source, pos, target, at):
    copy_block(source, pos, target, at)


@njit
def _bits(mask):
    return lowest_bit(mask), leading_zeros(mask), escaped_bytes(mask)


def _special(byte: int, lenient: bool) -> bool:
    return byte in (0x22, 0x5C) or byte >= 0x80 or (byte < 0x20 and not lenient)


def test_words_load_and_store_little_endian_at_every_alignment():
    data = np.arange(32, dtype=np.uint8)
    for pos in range(32 - WORD + 1):
        assert int(_load(data, pos)) == int.from_bytes(bytes(data[pos : pos + WORD]), "little")
    out = np.zeros(24, np.uint8)
    _store(out, np.int64(5), np.uint64(0x0807060504030201))
    assert out.tolist() == [0] * 5 + list(range(1, 9)) + [0] * 11


@pytest.mark.parametrize("lenient", [False, True])
def test_the_lowest_stop_of_a_word_is_its_first_special_byte(lenient):
    rng = random.Random(7)
    # Every byte value at every place, among neighbours that provoke a borrow (0x00, 0x1f,
    # 0x20, 0x21, 0x22, 0x23, 0x5b-0x5d, 0x7f, 0x80, 0xff) and plain letters.
    near = [0x00, 0x01, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7F, 0x80, 0xFF, 0x61]
    cases = []
    for value in range(256):
        for place in range(WORD):
            word = [rng.choice(near) if rng.random() < 0.3 else 0x61 for _ in range(WORD)]
            word[place] = value
            cases.append(word)
    cases += [[rng.choice(near) for _ in range(WORD)] for _ in range(20_000)]
    for word in cases:
        value = np.uint64(int.from_bytes(bytes(word), "little"))
        expected = next((i for i, b in enumerate(word) if _special(b, lenient)), WORD)
        assert _stops(value, lenient) == expected, word
        expected = next((i for i, b in enumerate(word) if b == 0x5C), WORD)
        assert _backslash(value) == expected, word


def test_every_backslash_u_pair_of_a_word_is_marked():
    """No miss (a false hit is checked by the caller): bytes 0-6, among neighbours that
    provoke a borrow (u - 1 = t, a backslash + 1 = ])."""
    rng = random.Random(13)
    alphabet = [0x5C, 0x75, 0x74, 0x5D, 0x5B, 0x76, 0x00, 0x01, 0x61]
    for _ in range(50_000):
        word = [rng.choice(alphabet) for _ in range(WORD)]
        mask = int(_unicode(np.uint64(int.from_bytes(bytes(word), "little"))))
        for i in range(WORD - 1):
            if word[i] == 0x5C and word[i + 1] == 0x75:
                assert mask >> (8 * i + 7) & 1, word


def _mask(bits) -> int:
    return sum(1 << i for i, bit in enumerate(bits) if bit)


def test_a_block_marks_every_byte_exactly_at_every_alignment():
    rng = random.Random(19)
    text = bytes(range(256)) + bytes(rng.randrange(256) for _ in range(200))
    data = np.frombuffer(text, np.uint8)
    for pos in range(len(text) - BLOCK + 1):
        block = text[pos : pos + BLOCK]
        for byte in {0x00, 0x20, 0x22, 0x5C, 0x80, 0xFF, text[pos]}:
            equal, below, high = (int(m) for m in _blocks(data, pos, byte))
            assert equal == _mask(b == byte for b in block)
            assert below == _mask(b < byte for b in block)
            assert high == _mask(b >= 0x80 for b in block)
    out = np.zeros(3 * BLOCK, np.uint8)
    _copy(data, 7, out, 13)
    assert bytes(out[13 : 13 + BLOCK]) == text[7 : 7 + BLOCK] and not out[:13].any()
    assert not out[13 + BLOCK :].any()


def test_a_block_escapes_the_byte_after_each_odd_run_of_backslashes():
    rng = random.Random(23)
    masks = [0, 1, 1 << 63, (1 << 64) - 1, 0x5555555555555555, 0xAAAAAAAAAAAAAAAA]
    masks += [rng.getrandbits(64) & rng.getrandbits(64) for _ in range(20_000)]
    masks += [((1 << rng.randrange(1, 64)) - 1) << rng.randrange(0, 8) & (2**64 - 1)]
    for mask in masks:
        lowest, leading, escaped = _bits(np.uint64(mask))
        assert lowest == ((mask & -mask).bit_length() - 1 if mask else 64)
        assert leading == 64 - mask.bit_length()
        expected, run = 0, 0
        for i in range(64):
            if mask >> i & 1:
                run += 1
            else:
                expected |= (run % 2) << i
                run = 0
        assert int(escaped) == expected, hex(mask)


_PIECES = [
    b"a",
    b"abcdefgh",
    b" ",
    b"~",
    b"\x7f",
    b'"',
    b"\\",
    b'\\"',
    b"\\\\",
    b"\\/",
    b"\\n",
    b"\\t",
    b"\\b",
    b"\\f",
    b"\\r",
    b"\\x",
    b"\\u00e9",
    b"\\u0022",
    b"\\ud83d\\ude00",
    b"\\ud800",
    b"\\udc00",
    b"\\u12",
    b"\x01",
    b"\x1f",
    "é".encode(),
    "€".encode(),
    "😀".encode(),
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
]


def _random_string(rng: random.Random) -> bytes:
    plain = rng.random() < 0.5  # long plain runs, as in real answers, half the time
    pieces = []
    for _ in range(rng.randrange(0, 12)):
        if plain and rng.random() < 0.7:
            pieces.append(b"x" * rng.randrange(1, 20))
        else:
            pieces.append(rng.choice(_PIECES))
    return b"".join(pieces)


def _expected_end(buffer: bytes, start: int, end: int, lenient: bool) -> int:
    """The position after the closing quote of the string at ``start`` if it is valid JSON by
    the kernels' rules (:func:`loads_python`), else -1."""
    i = start + 1
    while i < end:
        if buffer[i] == 0x5C:
            i += 2
        elif buffer[i] == 0x22:
            try:
                loads_python(buffer[start : i + 1], lenient=lenient)
            except ValueError:
                return -1
            return i + 1
        else:
            i += 1
    return -1


def _long_string(rng: random.Random) -> bytes:
    """Strings of several blocks: dense escapes (a model's JSON in the content), runs of
    backslashes of every length (across a block's end, longer than a block), a stray byte."""
    pieces = []
    for _ in range(rng.randrange(10, 90)):
        roll = rng.random()
        if roll < 0.35:
            pieces.append(b"x" * rng.randrange(1, 14))
        elif roll < 0.55:
            pieces.append(b'\\"')
        elif roll < 0.6:
            pieces.append(b"\\" * rng.randrange(1, 40) + rng.choice([b'"', b"n", b"\\", b"u"]))
        else:
            pieces.append(rng.choice(_PIECES))
    return b"".join(pieces)


def _short(rng: random.Random, lenient: bool) -> bytes:
    return _random_string(rng) + (b'"' if rng.random() < 0.9 else b"")


def _long(rng: random.Random, lenient: bool) -> bytes:
    body = _long_string(rng)
    if rng.random() < 0.7:  # mostly valid ones, which reach the closing quote
        body = bytes(b for b in body if b >= 0x20 or lenient).replace(b"\\u12", b"")
    return body + b'"'


#: (strings, alignments and padding): short ones a word at a time, long ones over blocks.
_SIZES = [(_short, WORD, 6_000), (_long, BLOCK, 3_000)]


@pytest.mark.parametrize("make, align, cases", _SIZES, ids=["short", "long"])
@pytest.mark.parametrize("lenient", [False, True])
def test_a_string_scan_ends_where_the_byte_by_byte_rule_does(make, align, cases, lenient):
    rng = random.Random(11 + lenient + align)
    for _ in range(cases):
        lead = rng.randrange(0, align)  # the string at every alignment
        buffer = b"#" * lead + b'"' + make(rng, lenient) + b"x" * rng.randrange(0, 2 * align)
        data = np.frombuffer(buffer, np.uint8)
        # The scan stops at ``end``: at the buffer's end, or cut short inside the string.
        for end in {len(buffer), rng.randrange(lead + 1, len(buffer) + 1)}:
            got = scan_string(data, lead, end, lenient)
            assert got == _expected_end(buffer, lead, end, lenient), (buffer, end)


#: A byte or an escape a string scan must stop at, valid or not.
_STOPS = [b'\\"', b"\\n", b"\\u00e9", b"\\x", b"\x01", b"\x1f", b"\xc3\xa9", b"\xff", b"\xc3", b'"']


@pytest.mark.parametrize("lenient", [False, True])
@pytest.mark.parametrize("stop", _STOPS, ids=repr)
def test_a_stop_at_each_byte_of_the_first_block_is_seen_before_the_quote(stop, lenient):
    # scan_string ends a string at once where the first byte of the block after its opening
    # quote that needs a look is the closing quote: an escape, a control byte or a byte past
    # ASCII at each place before the quote (in the block, at its last byte, just past it) is
    # seen, and the string's end may be the buffer's, where the block ends or before.
    for at in range(0, BLOCK + 2):
        for after in (0, 1, 7, BLOCK - at):
            body = b"a" * at + stop + b"b" * max(after, 0)
            for tail in (b"", b"x" * (BLOCK - len(body) - 1), b"x" * BLOCK):
                buffer = b'"' + body + b'"' + tail
                data = np.frombuffer(buffer, np.uint8)
                for end in {len(buffer), len(body) + 1, len(body) + 2, BLOCK + 1, BLOCK + 2}:
                    if end > len(buffer):
                        continue
                    got = scan_string(data, 0, end, lenient)
                    assert got == _expected_end(buffer, 0, end, lenient), (buffer, end)


@pytest.mark.parametrize(
    "make, align, cases", [(_random_string, WORD, 4_000), (_long_string, BLOCK, 2_000)],
    ids=["short", "long"],
)  # fmt: skip
def test_strings_unescape_as_json_reads_them_and_write_only_their_room(make, align, cases):
    rng = random.Random(5 + align)
    checked = 0
    while checked < cases:
        body = make(rng)
        try:
            expected = json.loads(b'"' + body + b'"')
            loads_python(b'"' + body + b'"', lenient=True)
        except ValueError:
            continue
        if body.count(b'"') != body.count(b'\\"'):  # a quote ends the string early
            continue
        checked += 1
        lead = rng.randrange(0, align)
        # Padding past three blocks lets the block copies run to the string's end.
        data = np.frombuffer(b"#" * lead + body + b"#" * rng.randrange(0, 3 * align), np.uint8)
        at = rng.randrange(0, align)
        out = np.full(at + len(body) + ROOM_AFTER + align, 0xAA, np.uint8)
        after = _unescape_into(data, lead, lead + len(body), out, at)
        assert bytes(out[at:after]) == expected.encode("utf-8", "surrogatepass"), body
        assert (out[:at] == 0xAA).all()  # nothing before the string's place
        # nor past its room (its escaped length) and the bytes left after it
        assert (out[at + len(body) + ROOM_AFTER :] == 0xAA).all()


def test_a_needle_and_an_escape_are_found_at_every_place_and_nowhere_else():
    rng = random.Random(37)
    needle = np.frombuffer(b"custom_id", np.uint8)
    for _ in range(2_000):
        hay = bytes(rng.choice(b"cdustom_i\\u0x") for _ in range(rng.randrange(0, 300)))
        for piece in (b"custom_id", b"\\u00%02x" % rng.randrange(0x50, 0x80)):
            if rng.random() < 0.4:
                at = rng.randrange(0, len(hay) + 1)
                hay = hay[:at] + piece[: rng.choice([len(piece), len(piece), 8, 5])] + hay[at:]
        data = np.frombuffer(hay, np.uint8)
        assert holds_bytes(data, needle) == (b"custom_id" in hay), hay
        escapes = [hay[i + 2 : i + 6] for i in range(len(hay) - 5) if hay[i : i + 4] == b"\\u00"]
        hexes = [e for e in escapes if all(chr(c) in "0123456789abcdefABCDEF" for c in e)]
        hit = any(0x5F <= int(e, 16) <= 0x75 for e in hexes)
        assert holds_escape(data, 0x5F, 0x75) == hit, hay


def test_runs_compare_equal_only_when_every_byte_is():
    rng = random.Random(3)
    x = np.frombuffer(bytes(rng.randrange(256) for _ in range(64)), np.uint8)
    for length in range(0, 40):
        for a in range(0, WORD + 1):
            b = rng.randrange(0, 64 - length)
            y = x.copy()
            y[b : b + length] = x[a : a + length]
            assert same_run(x, a, y, b, length)
            if length:
                flip = b + rng.randrange(length)
                y[flip] ^= 1 << rng.randrange(8)
                assert not same_run(x, a, y, b, length)


@pytest.mark.parametrize("length", [*range(20), 56, 63, 64, 65, 71, 72, 127, 128, 129, 200])
def test_runs_of_blocks_and_words_differ_at_any_byte_and_ignore_the_bytes_around(length):
    # A run compares blocks of 64, then words, then its last bytes as one word (the last
    # eight, or the first eight masked to the run): a difference at each of its bytes is
    # found, the bytes after it are not compared, and a run may end where either array ends.
    rng = random.Random(length)
    run = bytes(rng.randrange(256) for _ in range(length))
    for x_after, y_after in [(0, 0), (0, 9), (3, 0), (9, 5)]:
        x_before, y_before = rng.randrange(0, 9), rng.randrange(0, 9)
        x = bytes(rng.randrange(256) for _ in range(x_before)) + run + b"\x00" * x_after
        y = bytes(rng.randrange(256) for _ in range(y_before)) + run + b"\xff" * y_after
        xs, ys = np.frombuffer(x, np.uint8), np.frombuffer(y, np.uint8).copy()
        assert same_run(xs, x_before, ys, y_before, length)
        for k in range(length):
            ys[y_before + k] ^= 1 << rng.randrange(8)
            assert not same_run(xs, x_before, ys, y_before, length), (k, x_after, y_after)
            ys[y_before + k] = run[k]


def test_a_byte_and_a_fence_are_found_where_python_finds_them():
    from dspark_json.parse.json.candidates import find_fence
    from dspark_json.parse.json.grammar import find_byte

    rng = random.Random(17)
    for _ in range(5_000):
        text = bytes(rng.choice(b"ab`{}\n\x7b\xff") for _ in range(rng.randrange(0, 40)))
        data = np.frombuffer(text, np.uint8)
        start = rng.randrange(0, len(text) + 1)
        end = rng.randrange(start, len(text) + 1)
        for byte in (ord("`"), ord("{"), 0xFF):
            assert find_byte(data, start, end, byte) == text.find(bytes([byte]), start, end)
        assert find_fence(data, start, end) == text.find(b"```", start, end), (text, start, end)
