"""Files are read as streams, a piece at a time, never whole: the row index and the rows read are
those of the whole file whatever the piece size (rows across pieces, lone CRs, BOMs, no final
newline), for plain, compressed and UTF-16 files; a compressed file's rows in a micro-batch go to
one task, which decompresses the file once."""

from __future__ import annotations

import bz2
import gzip
import logging
import random

import pytest

from dspark_json.errors import DSparkJsonError
from dspark_json.inputs import row_index, streams
from dspark_json.inputs.files import index_rows, rows_of
from dspark_json.inputs.listing import (
    Position,
    PromptListing,
    PromptPartition,
    plan_partitions,
    read_rows,
    segment_packed,
)
from tests.inputs.test_row_index_property import _file


def pieces_of(partition: PromptPartition) -> tuple[PromptPartition, ...]:
    return partition.parts or (partition,)


def read_all(listing: PromptListing, size: int) -> tuple[list[PromptPartition], list[bytes]]:
    segments = listing.segments(Position(), listing.end())
    partitions = plan_partitions(segments, size, listing.locate)
    rows = [
        line
        for partition in partitions
        for part in pieces_of(partition)
        for segment in part.segments
        for line, _ in read_rows(segment)
    ]
    return partitions, rows


@pytest.mark.parametrize("seed", range(40))
def test_streamed_index_and_reads_are_the_whole_files_rows(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    piece = rng.choice([1, 2, 5, 17, 64, 333, 4096])
    monkeypatch.setattr(streams, "PIECE", piece)
    monkeypatch.setattr(row_index._Cursor, "_last", None)
    texts = {}
    for k in range(rng.randint(1, 3)):
        text = _file(rng)
        form = rng.choice(["plain", "plain", "gz", "bz2", "utf16"])
        name = f"f{k}.jsonl" + {"gz": ".gz", "bz2": ".bz2"}.get(form, "")
        data = {"gz": gzip.compress, "bz2": bz2.compress}.get(form, lambda d: d)(text)
        if form == "utf16":
            decoded = text.decode("utf-8", "replace")
            data = b"\xff\xfe" + decoded.encode("utf-16-le")
            text = decoded.encode("utf-8")
        (tmp_path / name).write_bytes(data)
        texts[name] = text
        index = index_rows(str(tmp_path / name))
        assert index.rows == len(rows_of(text))
        if form == "plain":
            monkeypatch.setattr(streams, "PIECE", 1 << 24)
            assert index == index_rows(str(tmp_path / name))  # as if read whole
            monkeypatch.setattr(streams, "PIECE", piece)
            assert (index.starts is None) == (b"\r" in text.replace(b"\r\n", b""))
    listing = PromptListing(str(tmp_path))
    _, got = read_all(listing, rng.choice([1, 3, 64, 100, 1000]))
    assert got == [row for name in sorted(texts) for row in rows_of(texts[name])]


def test_the_index_of_a_plain_file_is_the_same_whatever_the_piece(tmp_path, monkeypatch):
    rng = random.Random(7)
    text = b"".join(
        b'{"i": %d, "pad": "%s"}\n' % (i, b"x" * rng.randint(0, 90)) for i in range(999)
    )
    path = tmp_path / "a.jsonl"
    path.write_bytes(text)
    whole = index_rows(str(path))
    for piece in (1, 10, 100, 4096):
        monkeypatch.setattr(streams, "PIECE", piece)
        assert index_rows(str(path)) == whole


def test_a_compressed_file_is_decompressed_once_per_micro_batch(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(streams, "PIECE", 256)
    monkeypatch.setattr(row_index._Cursor, "_last", None)
    lines = b"".join(b'{"prompt": "p%d"}\n' % i for i in range(1000))
    (tmp_path / "a.jsonl").write_bytes(lines[:200])
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(lines))
    (tmp_path / "c.jsonl").write_bytes(lines[:100])
    listing = PromptListing(str(tmp_path))
    with caplog.at_level(logging.DEBUG, logger="dspark_json"):
        partitions, got = read_all(listing, 64)
    assert got == rows_of(lines[:200]) + rows_of(lines) + rows_of(lines[:100])
    compressed = [p for p in partitions if p.parts]
    assert len(compressed) == 1  # one task for all of b's rows in this batch...
    assert [(s.start, s.end) for s in compressed[0].segments][:2] == [(0, 64), (64, 128)]
    assert sum(s.end - s.start for s in compressed[0].segments) == 1000
    opened = [r for r in caplog.records if "Decompressing input file" in r.getMessage()]
    assert len(opened) == 2  # ...which reads it once (the listing counted it once before)
    numbers = [p.index for p in partitions] + [q.index for p in compressed for q in p.parts]
    assert len(set(numbers)) == len(numbers)  # metrics name each part by its own number


def test_a_part_read_again_or_out_of_order_reads_the_same_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(streams, "PIECE", 100)
    monkeypatch.setattr(row_index._Cursor, "_last", None)
    lines = b"".join(b'{"prompt": "p%d"}\n' % i for i in range(500))
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(lines))
    listing = PromptListing(str(tmp_path))
    (partition,) = plan_partitions(listing.segments(Position(), listing.end()), 50, listing.locate)
    want = rows_of(lines)
    for k in (3, 3, 0, 9, 4):  # a retried task, then parts in any order
        (segment,) = partition.parts[k].segments
        assert [line for line, _ in read_rows(segment)] == want[k * 50 : (k + 1) * 50]
        data, offsets = segment_packed(segment)
        assert data[offsets[0] : offsets[1]].tobytes() == want[k * 50]


def test_a_truncated_stream_still_fails_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(streams, "PIECE", 64)
    data = gzip.compress(b"".join(b'{"prompt": "p%d"}\n' % i for i in range(300)))
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DSparkJsonError, match=r"a\.jsonl\.gz starts as a gzip stream but cannot"):
        index_rows(str(path))
