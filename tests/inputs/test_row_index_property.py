"""Hostile property: rows read through the listing's row index (plan_partitions + locate +
read_rows, ranged reads), as lists or packed end to end (recorded answers), are exactly
rows_of(whole file), in order, for files with blank and whitespace-only lines, BOMs at line
starts, CRLF / mixed ends, a lone CR, no final newline."""

import random

import pytest

from dspark_json.inputs.files import pack_rows, rows_of
from dspark_json.inputs.listing import (
    Position,
    PromptListing,
    plan_partitions,
    read_rows,
    segment_packed,
)

BOM = b"\xef\xbb\xbf"


def _file(rng):
    parts = []
    for i in range(rng.randint(0, 300)):
        r = rng.random()
        if r < 0.1:
            parts.append(b"")
        elif r < 0.15:
            parts.append(rng.choice([b"  ", b"\t", b" \x0b ", b"\x0c", BOM, BOM + b"  ", b"\r"]))
        else:
            text = rng.choice([b"a", "é".encode(), b"\xff", b"\x0c", b"long " * rng.randint(1, 40)])
            row = b'{"i":%d,"s":"%s"}' % (i, text)
            if rng.random() < 0.05:
                row = BOM + row
            if rng.random() < 0.05:
                row = b"  " + row + b" \t"
            parts.append(row)
    ends = rng.choice(["lf", "crlf", "mix"])
    out = b"".join(
        p + (b"\n" if ends == "lf" else b"\r\n" if ends == "crlf" else rng.choice([b"\n", b"\r\n"]))
        for p in parts
    )
    if rng.random() < 0.3:
        out = out.rstrip(b"\r\n")
    if rng.random() < 0.05:
        out = out.replace(b"\n", b"\r", 1)
    if rng.random() < 0.2:
        out = BOM + out
    return out


@pytest.mark.parametrize("seed", range(30))
def test_indexed_reads_give_the_rows_of_the_whole_file(tmp_path, seed):
    rng = random.Random(seed)
    files = {f"f{k}.jsonl": _file(rng) for k in range(rng.randint(1, 3))}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    listing = PromptListing(str(tmp_path))
    segments = listing.segments(Position(), listing.end())
    size = rng.choice([1, 7, 63, 64, 65, 100, 128, 1000])
    parts = plan_partitions(segments, size, listing.locate)
    got = [line for part in parts for segment in part.segments for line, _ in read_rows(segment)]
    want = [row for name in sorted(files) for row in rows_of(files[name])]
    assert got == want
    packed = [segment_packed(segment) for part in parts for segment in part.segments]
    assert [_unpacked(data, offsets) for data, offsets in packed] == [
        [line for line, _ in read_rows(segment)] for part in parts for segment in part.segments
    ]


def _unpacked(data, offsets):
    return [data[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(offsets) - 1)]


@pytest.mark.parametrize("seed", range(30))
def test_packed_rows_are_the_rows(seed):
    rng = random.Random(seed)
    text = _file(rng)
    rows = rows_of(text)
    skip, take = rng.randint(0, len(rows) + 1), rng.randint(0, len(rows) + 1)
    assert _unpacked(*pack_rows(text, skip, take)) == rows[skip : skip + take]


def _plain_file(rng):
    """LF line ends, no blank line, no line opening with a space or a BOM: what recorded
    answers usually are (rows shorter and longer than the 64-byte blocks the split copies)."""
    rows = [
        b'{"i":%d,"s":"%s"}%s'
        % (
            i,
            rng.choice([b"a", "é".encode(), b"\xff", b"x" * rng.randint(40, 300)]),
            rng.choice([b"", b" "]),
        )
        for i in range(rng.randint(1, 200))
    ]
    return b"\n".join(rows) + rng.choice([b"\n", b""]), rows


@pytest.mark.parametrize("seed", range(30))
def test_plain_files_are_the_rows(seed):
    rng = random.Random(seed)
    text, rows = _plain_file(rng)
    skip, take = rng.randint(0, len(rows) + 2), rng.randint(0, len(rows) + 2)
    assert rows_of(text)[skip : skip + take] == rows[skip : skip + take]
    assert _unpacked(*pack_rows(text, skip, take)) == rows[skip : skip + take]


@pytest.mark.parametrize(
    "text",
    [b'{"a":1}\n\n{"b":2}\n', b'{"a":1}\n {"b":2}\n', b'{"a":1}\n\t\n', BOM + b'{"a":1}\n', b"\n"],
)
def test_lines_that_may_not_be_rows_are_not(text):
    assert _unpacked(*pack_rows(text, 0, 10)) == rows_of(text)
