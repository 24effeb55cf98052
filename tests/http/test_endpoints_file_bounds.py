"""Option endpointsFile against hostile files (issue 53): bounded in bytes as stored and as
decompressed, and in endpoints; its type checked before it is opened; lines that are no URL to
send to refused naming the option, the line and the fix."""

from __future__ import annotations

import bz2
import gzip
import os

import pytest

from dspark_json.errors import OptionError
from dspark_json.http.replicas import MAX_ENDPOINTS, MAX_ENDPOINTS_FILE_BYTES, read_endpoints_file

LINE = b"http://10.0.0.7:8000\n"


def refused(path) -> str:
    with pytest.raises(OptionError) as caught:
        read_endpoints_file(str(path))
    message = str(caught.value)
    assert "'endpointsFile'" in message and str(path) in message
    return message


@pytest.mark.parametrize("suffix", [".gz", ".bz2"])
def test_a_small_compressed_file_that_decompresses_past_the_limit_is_refused(tmp_path, suffix):
    """A 521 KB replicas.txt.gz grew .load() by 1.55 GB: now at most the limit and a byte are
    decompressed."""
    data = LINE * (4 * MAX_ENDPOINTS_FILE_BYTES // len(LINE))
    path = tmp_path / f"replicas.txt{suffix}"
    path.write_bytes(gzip.compress(data) if suffix == ".gz" else bz2.compress(data))
    assert path.stat().st_size < MAX_ENDPOINTS_FILE_BYTES  # small as stored
    message = refused(path)
    assert f"over the limit of {MAX_ENDPOINTS_FILE_BYTES} bytes" in message
    assert "decompressed" in message


def test_a_file_over_the_limit_as_stored_is_refused_with_its_size(tmp_path):
    path = tmp_path / "replicas.txt"
    path.write_bytes(LINE * (MAX_ENDPOINTS_FILE_BYTES // len(LINE) + 1))
    message = refused(path)
    assert f"{path.stat().st_size} bytes as stored" in message and "1048576" in message


def test_a_compressed_file_within_the_limit_is_read(tmp_path):
    path = tmp_path / "replicas.txt.gz"
    path.write_bytes(gzip.compress(b"http://10.0.0.7:8000\nhttp://10.0.0.8:8000\n"))
    assert [e.url for e in read_endpoints_file(str(path))] == [
        "http://10.0.0.7:8000",
        "http://10.0.0.8:8000",
    ]


def test_more_endpoints_than_the_limit_are_refused(tmp_path):
    path = tmp_path / "replicas.txt"
    path.write_text(
        "".join(f"http://10.0.{i // 250}.{i % 250}:8000\n" for i in range(MAX_ENDPOINTS + 1))
    )
    assert path.stat().st_size < MAX_ENDPOINTS_FILE_BYTES
    message = refused(path)
    assert f"more than {MAX_ENDPOINTS} endpoints (line {MAX_ENDPOINTS + 1})" in message


@pytest.mark.timeout(20)
def test_a_fifo_is_never_opened(tmp_path):
    path = tmp_path / "replicas.txt"
    os.mkfifo(path)
    assert "not a regular file (a FIFO)" in refused(path)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("http://10.0.0.7:99999", "a port that is not a number from 1 to 65535"),
        ("http://10.0.0.7:abc", "a port that is not a number from 1 to 65535"),
        ("http://10.0.0.7:0", "a port that is not a number from 1 to 65535"),
        ("http://10.0.\x00.7:8000", "a control character ('\\x00')"),
        ("http://10.0.0.7\t:8000", "a control character ('\\t')"),
        ("http://vllm\x85b:8000", "a control character ('\\x85')"),
        ("http://[::1:8000", "an IPv6 address that is not closed"),
        ("http://vllm!b:8000", "a host name with characters no host name has"),
    ],
)
def test_a_line_with_a_bad_port_a_control_character_or_a_bad_host_is_refused(tmp_path, line, said):
    """Port 99999 or abc, a NUL: raw Python errors at the first request before, no option named."""
    path = tmp_path / "replicas.txt"
    path.write_text(f"http://10.0.0.1:8000\n{line}\n", encoding="utf-8")
    message = refused(path)
    assert "line 2 of" in message and said in message and "http://10.0.0.7:8000" in message


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "replicas.txt"
    path.write_bytes(b"http://10.0.0.1:8000\n\xff\xfe\n")
    assert "not UTF-8 text (byte 21)" in refused(path)


def test_a_byte_order_mark_and_crlf_line_ends_are_read(tmp_path):
    """A file saved by a Windows editor: a UTF-8 byte order mark and CRLF line ends."""
    path = tmp_path / "replicas.txt"
    path.write_bytes(b"\xef\xbb\xbfhttp://10.0.0.7:8000\r\nhttp://10.0.0.8:8000\r\n")
    assert [e.url for e in read_endpoints_file(str(path))] == [
        "http://10.0.0.7:8000",
        "http://10.0.0.8:8000",
    ]


def test_a_directory_is_refused_as_not_a_regular_file(tmp_path):
    (tmp_path / "replicas.txt").mkdir()
    assert "not a regular file (a directory)" in refused(tmp_path / "replicas.txt")
