"""Option prometheusPort: the run's figures scraped over HTTP in Prometheus' text format."""

import httpx

from dspark_json.progress import write_batch, write_run
from dspark_json.prometheus import METRICS, serve
from dspark_json.storage import ENVIRONMENT_ONLY


def test_scrape_serves_the_progress_in_text_exposition_format(tmp_path):
    metrics = str(tmp_path)
    write_run(
        metrics,
        storage=ENVIRONMENT_ONLY,
        first_batch=0,
        started=1.0,
        prompts=120,
        trigger="availableNow",
    )
    write_batch(metrics, storage=ENVIRONMENT_ONLY, batch=0, prompts=120, partitions=1)
    server = serve(0, metrics, host="127.0.0.1")
    assert server is not None
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        answer = httpx.get(url + "/metrics", timeout=10)
        assert httpx.get(url + "/nothing", timeout=10).status_code == 404
    finally:
        server.shutdown()
        server.server_close()
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = answer.text
    for name, kind, _ in METRICS:
        assert f"# TYPE {name} {kind}" in text
    assert "dspark_json_prompts_planned 120\n" in text
    assert "dspark_json_prompts_total 0\n" in text
    assert 'dspark_json_tokens_total{kind="cached"} 0\n' in text
    assert "dspark_json_run_finished 0\n" in text


def test_a_port_taken_is_a_warning_not_a_failure(tmp_path, caplog):
    first = serve(0, str(tmp_path), host="127.0.0.1")
    assert first is not None
    try:
        assert serve(first.server_address[1], str(tmp_path), host="127.0.0.1") is None
    finally:
        first.shutdown()
        first.server_close()
    assert "cannot listen" in caplog.text


def test_a_query_run_again_in_the_same_driver_serves_the_new_run(tmp_path, caplog):
    """A restarted query (a notebook's, or each run of start() on Spark 4.0/4.1) asks for the
    port its earlier run holds: the earlier server is pointed at the new run's metrics, not a
    WARN 'cannot listen' while the old server goes on showing the old run's figures."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    old, new = str(tmp_path / "old"), str(tmp_path / "new")
    for where, prompts in ((old, 10), (new, 99)):
        write_batch(where, storage=ENVIRONMENT_ONLY, batch=0, prompts=prompts, partitions=1)
    first = serve(port, old, host="127.0.0.1")
    assert first is not None
    try:
        again = serve(port, new, host="127.0.0.1")
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    finally:
        first.shutdown()
        first.server_close()
    assert again is first
    assert "dspark_json_prompts_planned 99\n" in answer.text
    assert "cannot listen" not in caplog.text


def test_large_counters_are_exact():
    """A run's tokens pass a million quickly: written with ':g' a counter kept six digits
    (98765432 read 9.87654e+07), so rate() saw steps, not the run."""
    from dspark_json.progress import summarize
    from dspark_json.prometheus import exposition

    task = {"kind": "task", "state": "done", "done": 1234567, "ok": 1234567, "started": 1.0,
            "updated": 2.0, "cost_usd": 12345.678901,
            "tokens": {"input": 98765432, "output": 1, "cached": 0}}  # fmt: skip
    text = exposition(summarize(None, [], [task], now=3.0))
    assert "dspark_json_prompts_total 1234567\n" in text
    assert 'dspark_json_tokens_total{kind="input"} 98765432\n' in text
    assert "dspark_json_cost_usd_total 12345.678901\n" in text
