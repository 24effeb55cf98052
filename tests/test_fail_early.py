"""Loud early failures against a real simulator process: ``parseMode=gpu`` without cuDF sends no
request (checked at ``.load()`` and again in each task), and a server killed after ``.load()``
is named in a WARN while the prompts wait (then their rows get ``_error``)."""

import logging
import threading

import pytest

from dspark_json.dev.local import SimulatorProcess
from dspark_json.errors import BackendUnavailable
from dspark_json.http import endpoints
from dspark_json.load import prepare
from dspark_json.options import Options, Query
from dspark_json.parse import gpu
from dspark_json.source import DSparkJsonDataSource
from tests.helpers import write_prompts

needs_no_cudf = pytest.mark.skipif(
    gpu.unavailable_reason() is None, reason="a GPU parser can run here"
)


def prompts(tmp_path, n=4):
    rows = [{"custom_id": f"p{i}", "prompt": f"Question {i}"} for i in range(n)]
    write_prompts(tmp_path / "in", "a.jsonl", rows)
    return str(tmp_path / "in")


def partitions(query: Query):
    source = DSparkJsonDataSource({})
    source.__dict__["_query"] = query  # what .load() settled, as Spark hands it on
    reader = source.reader(source.schema())
    return reader, reader.partitions()


@needs_no_cudf
def test_parse_mode_gpu_without_cudf_fails_at_load_and_in_each_task_before_any_request(
    tmp_path,
):
    with SimulatorProcess() as server:
        raw = {
            "endpoint": server.url,
            "prompts": prompts(tmp_path),
            "parseMode": "gpu",
            "inferSchemaSamples": "0",
        }
        with pytest.raises(BackendUnavailable, match=r"parseMode=gpu, but cuDF is not installed"):
            prepare(Options.parse(raw))
        # A task checks again before its HTTP phase (a driver may not see what executors have).
        cpu = prepare(Options.parse({**raw, "parseMode": "cpu"}))
        gpu_query = Query(options=Options.parse(raw), model=cpu.model)
        reader, (partition,) = partitions(gpu_query)
        with pytest.raises(BackendUnavailable, match="parseMode=gpu was asked for"):
            list(reader.read(partition))
        stats = server.stats()
    assert "chat_completions" not in stats, stats  # no prompt was sent, by .load() or the task


def test_a_server_killed_after_load_is_named_in_a_warn_while_prompts_wait(
    tmp_path, monkeypatch, caplog
):
    caplog.set_level(logging.WARNING, logger="dspark_json")
    monkeypatch.setattr(endpoints, "WAIT_WARN_S", 0.2)  # the interval, not the clock
    with SimulatorProcess() as server:
        raw = {
            "endpoint": server.url,
            "prompts": prompts(tmp_path, n=6),
            "inferSchemaSamples": "0",
            "requestDeadline": "20",
            "maxConcurrency": "2",
            "initialConcurrency": "2",
        }
        query = prepare(Options.parse(raw))
        url = server.url
    # The server is gone now; the task's prompts have nowhere to go.
    reader, (partition,) = partitions(query)
    out: list = []
    task = threading.Thread(target=lambda: out.extend(reader.read(partition)), daemon=True)
    task.start()
    warned = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "not answering /v1/models" in record.getMessage():
                warned.set()

    handler = Seen()
    logging.getLogger("dspark_json").addHandler(handler)
    try:
        assert warned.wait(60), caplog.text
    finally:
        logging.getLogger("dspark_json").removeHandler(handler)
    task.join(120)
    assert not task.is_alive()
    message = next(r.getMessage() for r in caplog.records if "not answering" in r.getMessage())
    assert f"Endpoint {url} (for " in message
    assert "no endpoint is left to send to" in message
    assert "requestDeadline=20s" in message
    assert " prompt(s) of this task wait for an endpoint (the longest for " in message
    rows = [r for batch in out for r in batch.to_pylist()]
    assert len(rows) == 6 and {r["_status"] for r in rows} == {"http_error"}
    assert {r["_error"]["type"] for r in rows} <= {"endpoint_unavailable", "ConnectError"}


def test_the_auto_line_is_info_and_says_why_the_cpu_not_how_to_install(caplog, monkeypatch):
    from dspark_json.parse import choice

    monkeypatch.setattr(choice, "_fallbacks_logged", set())
    caplog.set_level(logging.INFO, logger="dspark_json")
    assert choice.select_backend("auto") == "cpu"
    (record,) = [r for r in caplog.records if "parseMode=auto" in r.getMessage()]
    assert record.levelname == "INFO"  # the usual case on a CPU machine: no fault to warn of
    message = record.getMessage()
    assert "pip install" not in message  # auto stays on the CPU with cuDF installed too
    assert "until it has passed the conformance suite on a GPU" in message
