"""Answers already paid for are never thrown away by our own I/O: the journal and metrics
locations are checked at .load(), before any request, and a write that fails later is logged
while the rows go on."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from dspark_json.errors import OptionError
from dspark_json.inputs.journal import Journal
from dspark_json.inputs.listing import Position, PromptListing, plan_partitions
from dspark_json.load import prepare, resolve_schema
from dspark_json.metrics import report
from dspark_json.options import Options
from dspark_json.pipeline import read_partition
from tests.raw_servers import alive, completion, raw_server, response


def answering(request):
    return alive(request) or response(200, completion('{"score": 1}'))


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory that exists and cannot be written, even by root where the filesystem
    allows making it immutable."""
    path = tmp_path / "read-only"
    path.mkdir()
    path.chmod(0o555)
    immutable = False
    if os.geteuid() == 0 and shutil.which("chattr"):
        immutable = subprocess.run(["chattr", "+i", str(path)], check=False).returncode == 0
    try:
        (path / "probe").write_text("x")
    except OSError:
        yield path
    else:
        pytest.skip("cannot make a directory read-only here")
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        path.chmod(0o755)


def prompt_dir(tmp_path: Path, n: int = 3) -> Path:
    directory = tmp_path / "prompts"
    directory.mkdir()
    (directory / "a.jsonl").write_text(
        "".join(json.dumps({"custom_id": f"c{i}", "prompt": f"p{i}"}) + "\n" for i in range(n))
    )
    return directory


def not_a_directory(tmp_path: Path) -> Path:
    """A path under a regular file: it can never be created."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory")
    return blocker / "sub"


@pytest.mark.parametrize("option", ["journal", "metrics"])
@pytest.mark.parametrize("where", ["read-only", "under-a-file", "is-a-file"])
def test_an_unwritable_journal_or_metrics_location_fails_load_before_any_request(
    option, where, tmp_path, request
):
    target = {
        "read-only": lambda: request.getfixturevalue("read_only_dir"),
        "under-a-file": lambda: not_a_directory(tmp_path),
        "is-a-file": lambda: not_a_directory(tmp_path).parent,
    }[where]()
    with raw_server(answering) as server:
        options = Options.parse(
            {"endpoint": server.url, "prompts": str(prompt_dir(tmp_path)), option: str(target)}
        )
        with pytest.raises(OptionError) as caught:
            prepare(options)
    assert f"Option {option!r} names {target}, which cannot be written" in str(caught.value)
    assert server.requests == []


def partition_and_query(server_url: str, tmp_path: Path, **extra: str):
    options = Options.parse({"endpoint": server_url, "prompts": str(tmp_path / "prompts"), **extra})
    query = prepare(options)
    listing = PromptListing(str(tmp_path / "prompts"))
    (partition,) = plan_partitions(listing.segments(Position(), listing.end()), 100)
    return partition, query, resolve_schema(query, [])


def test_a_metrics_write_that_fails_later_is_logged_and_the_rows_go_on(tmp_path, caplog):
    prompt_dir(tmp_path)
    metrics = tmp_path / "metrics"
    with raw_server(answering) as server:
        partition, query, schema = partition_and_query(server.url, tmp_path, metrics=str(metrics))
        shutil.rmtree(metrics)
        metrics.write_text("the directory was replaced by a file")
        with caplog.at_level(logging.WARNING, logger="dspark_json"):
            (batch,) = read_partition(partition, query, schema)
    assert batch.column("_status").to_pylist() == ["ok"] * 3
    assert "the metrics record could not be written" in caplog.text and str(metrics) in caplog.text


def test_a_journal_write_that_fails_later_is_logged_and_the_rows_go_on(tmp_path, caplog):
    prompt_dir(tmp_path)
    journal = tmp_path / "journal"
    with raw_server(answering) as server:
        partition, query, schema = partition_and_query(server.url, tmp_path, journal=str(journal))
        shutil.rmtree(journal)
        journal.write_text("the directory was replaced by a file")
        before = server.paths().count("/v1/chat/completions")  # the schema's samples
        with caplog.at_level(logging.ERROR, logger="dspark_json"):
            (batch,) = read_partition(partition, query, schema)
        sent = server.paths().count("/v1/chat/completions") - before
    assert batch.column("parsed").to_pylist() == [{"score": 1}] * 3 and sent == 3
    assert "could not be written" in caplog.text and "would ask the model again" in caplog.text


def test_a_metrics_report_to_an_impossible_directory_does_not_raise(tmp_path, caplog):
    record = {
        "batch": None,
        "partition": 0,
        "prompts": 0,
        "source": "server",
        "rows": {},
        "dropped": 0,
        "http_seconds": 0.0,
        "requests": 0,
        "retries": 0,
        "http_status": {},
        "latency_ms": {"p50": None, "p95": None, "p99": None},
        "inflight_limit": {"lowest": 1, "peak": 1},
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "parse_seconds": 0.0,
        "backend": "cpu",
        "reference_rows": 0,
        "rescued_rows": 0,
        "error_rows": 0,
        "new_fields": [],
    }
    with caplog.at_level(logging.WARNING, logger="dspark_json"):
        report(record, "partition 0", str(not_a_directory(tmp_path)))
    assert "could not be written" in caplog.text


def test_an_unreadable_journal_entry_is_asked_again_not_a_failed_task(tmp_path, caplog):
    journal = Journal(str(tmp_path))
    (tmp_path / "k.arrow").write_bytes(b"ARROW1 but not really")
    with caplog.at_level(logging.ERROR, logger="dspark_json"):
        assert journal.load("k") is None
    assert "cannot be read" in caplog.text
    # An entry written by someone else, with other columns.
    sink = pa.BufferOutputStream()
    table = pa.table({"other": [1]})
    with pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    (tmp_path / "k.arrow").write_bytes(sink.getvalue().to_pybytes())
    assert journal.load("k") is None
