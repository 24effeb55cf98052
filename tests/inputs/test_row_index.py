"""A task reads only the bytes of its rows: the listing indexes plain JSON lines files, and the
rows read through a window are exactly those a whole-file read gives, whatever the file holds
(blank lines, byte-order marks, CRLF); files that must be read whole are not indexed."""

import gzip
import random

import pytest

from dspark_json import fs
from dspark_json.errors import DSparkJsonError
from dspark_json.inputs import row_index as row_index_module
from dspark_json.inputs.files import ROW_STRIDE, index_rows, rows_of
from dspark_json.inputs.listing import Position, PromptListing, plan_partitions, read_rows


def _messy_lines(n, rng):
    out = []
    for i in range(n):
        line = f'{{"custom_id": "r{i}", "prompt": "row {i}"}}'.encode()
        if rng.random() < 0.05:
            line = b"\xef\xbb\xbf" + line
        out.append(line)
        if rng.random() < 0.1:
            out.append(rng.choice([b"", b"   ", b"\t", b"\xef\xbb\xbf"]))  # not rows
    return out


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"])
def test_rows_through_windows_equal_the_whole_file(tmp_path, ending, monkeypatch):
    rng = random.Random(3)
    text = ending.join(_messy_lines(1000, rng)) + rng.choice([b"", ending])
    (tmp_path / "a.jsonl").write_bytes(text)
    whole = rows_of(text)
    listing = PromptListing(str(tmp_path))
    segments = listing.segments(Position(), listing.end())
    assert listing.end() == Position("a.jsonl", len(whole))

    ranges = []
    real = fs.read_range

    def recorded(uri, start, end, **kwargs):
        ranges.append((start, end))
        return real(uri, start, end, **kwargs)

    monkeypatch.setattr(row_index_module, "read_range", recorded)
    for size in (1, 7, ROW_STRIDE, 100, 999):
        got, ranges[:] = [], []
        for partition in plan_partitions(segments, size, listing.locate):
            for segment in partition.segments:
                assert segment.window is not None
                got += [line for line, _ in read_rows(segment)]
        assert got == whole, size
        # A task reads its rows and less than one stride more on either side, not the file.
        widest = max((end or len(text)) - start for start, end in ranges)
        assert widest < (size + 2 * ROW_STRIDE) * len(text) / len(whole), size


def test_files_read_whole_are_not_indexed(tmp_path):
    lines = [f'{{"custom_id": "r{i}"}}'.encode() for i in range(200)]
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b"\n".join(lines)))
    (tmp_path / "b.jsonl").write_bytes(b"\r".join(lines))  # old Mac line ends
    (tmp_path / "c.jsonl").write_bytes(b"\xff\xfe" + b"\n".join(lines).decode().encode("utf-16-le"))
    for name in ("a.jsonl.gz", "b.jsonl", "c.jsonl"):
        index = index_rows(str(tmp_path / name))
        assert (index.rows, index.starts) == (200, None), name
    listing = PromptListing(str(tmp_path))
    for partition in plan_partitions(
        listing.segments(Position(), listing.end()), 64, listing.locate
    ):
        for segment in partition.segments:
            assert segment.window is None
            start = segment.start
            assert [line for line, _ in read_rows(segment)] == lines[start : segment.end]


def test_the_window_of_rows_at_a_stride_boundary_and_at_the_end(tmp_path):
    lines = [b'{"i": %d}\n' % i for i in range(3 * ROW_STRIDE)]
    (tmp_path / "a.jsonl").write_bytes(b"".join(lines))
    index = index_rows(str(tmp_path / "a.jsonl"))

    def start_of(row):
        return sum(len(line) for line in lines[:row])

    assert index.window(1, 2) == (0, start_of(ROW_STRIDE), 1)
    assert index.window(ROW_STRIDE, 2 * ROW_STRIDE) == (
        start_of(ROW_STRIDE),
        start_of(2 * ROW_STRIDE),
        0,
    )
    assert index.window(ROW_STRIDE + 1, 2 * ROW_STRIDE + 1) == (
        start_of(ROW_STRIDE),
        None,  # row 2 * STRIDE + 1 is in the last stride: to the file's end
        1,
    )
    assert index.window(3 * ROW_STRIDE - 1, 3 * ROW_STRIDE) == (start_of(2 * ROW_STRIDE), None, 63)


def test_a_file_rewritten_after_listing_is_an_error_not_torn_rows(tmp_path):
    lines = [b'{"custom_id": "r%d"}' % i for i in range(3 * ROW_STRIDE)]
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    listing = PromptListing(str(tmp_path))
    partitions = plan_partitions(listing.segments(Position(), listing.end()), 64, listing.locate)
    path.write_bytes(b"\n".join(b"x" + line for line in lines) + b"\n")  # same rows, shifted
    with pytest.raises(DSparkJsonError, match="changed after it was listed"):
        read_rows(partitions[1].segments[0])


def test_a_file_is_indexed_once_while_it_keeps_its_size_and_time(tmp_path, monkeypatch):
    """Spark plans every batch action anew: the second listing of an unchanged file does not
    read it again; a file rewritten in place (another size or time) is read again."""
    import os

    from dspark_json.inputs import listing as listing_module

    path = tmp_path / "a.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    reads = []
    real = listing_module.index_rows
    monkeypatch.setattr(
        listing_module, "index_rows", lambda p, **kw: reads.append(p) or real(p, **kw)
    )
    assert PromptListing(str(tmp_path)).end() == Position("a.jsonl", 2)
    assert PromptListing(str(tmp_path)).end() == Position("a.jsonl", 2)
    assert len(reads) == 1
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "c"}\n')
    assert PromptListing(str(tmp_path)).end() == Position("a.jsonl", 3)
    stat = path.stat()
    path.write_text('{"prompt": "x"}\n\n{"prompt": "z"}\n')  # same size, two rows
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert PromptListing(str(tmp_path)).end() == Position("a.jsonl", 2)
    assert len(reads) == 3
