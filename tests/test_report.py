"""``dspark-json report``: one self-contained HTML page, opened in headless Chromium (Debian's
package: tests/report/install_chromium.sh), whose plots draw without script errors."""

import json
import re
import shutil
import subprocess

import pytest

from dspark_json.cli import main
from dspark_json.progress import write_batch, write_run
from dspark_json.storage import ENVIRONMENT_ONLY

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def a_run(metrics):
    """The records of a finished run of two partitions: progress samples and metrics."""
    write_run(
        str(metrics),
        storage=ENVIRONMENT_ONLY,
        first_batch=0,
        started=1000.0,
        prompts=200,
        trigger="availableNow",
    )
    write_batch(str(metrics), storage=ENVIRONMENT_ONLY, batch=0, prompts=200, partitions=2)
    for part in range(2):
        samples = [[2.0 * i, 10 * i, 10 * i, 0.1 * i, 8] for i in range(11)]
        record = {
            "version": 1,
            "kind": "task",
            "batch": 0,
            "partition": part,
            "state": "done",
            "started": 1001.0 + part,
            "updated": 1021.0 + part,
            "prompts": 100,
            "done": 100,
            "ok": 97,
            "errors": {"not_json": 3},
            "requests": 104,
            "retries": 4,
            "http_status": {"200": 100, "429": 4},
            "tokens": {"input": 5000, "output": 1500, "cached": 800},
            "held_seconds": 1.0,
            "inflight": 8,
            "latency_ms": {"p50": 900.0, "p95": 1400.0},
            "models": {
                "m<x>": {
                    "done": 100,
                    "requests": 104,
                    "cost_usd": 0.01,
                    "tokens": {"input": 5000, "output": 1500, "cached": 800},
                }
            },
            "cost_usd": 0.01,
            "samples": samples,
        }
        (metrics / "_progress" / f"batch-000000-part-{part:05d}.json").write_text(
            json.dumps(record)
        )
        metrics_record = {
            "batch": 0,
            "offset": {"file": "a", "row": 200},
            "partition": part,
            "at": f"1970-01-01T00:17:{2 + part:02d}.000+00:00",
            "prompts": 100,
            "requests": 104,
            "retries": 4,
            "http_status": {"200": 100, "429": 4},
            "latency_ms": {"p50": 900.0 + part, "p95": 1400.0, "p99": 1500.0},
            "inflight_limit": {"lowest": 4, "peak": 8, "final": 8},
            "held_seconds": 1.0,
            "prompt_tokens": 5000,
            "cached_tokens": 800,
            "completion_tokens": 1500,
            "rows": {"ok": 97, "not_json": 3},
            "cost_usd": 0.01,
        }
        (metrics / f"batch-x-part-{part:05d}.json").write_text(json.dumps(metrics_record))


def chromium_or_skip():
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium: run tests/report/install_chromium.sh (Debian's package)")
    return found


def test_report_draws_every_plot_in_headless_chromium(tmp_path):
    chromium = chromium_or_skip()
    metrics = tmp_path / "metrics"
    (metrics / "_progress").mkdir(parents=True)
    a_run(metrics)
    page = tmp_path / "run.html"
    assert main(["report", str(metrics), "-o", str(page)]) == 0
    text = page.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")  # nothing fetched
    assert "m&lt;x&gt;" in text  # a model's name escaped

    done = subprocess.run(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    dom = done.stdout
    assert "<body" in dom, done.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert 'data-rendered="6"' in body, body  # every plot drawn...
    assert "data-errors" not in body, body  # ...and no script error on the way
    assert dom.count('class="series"') >= 4  # rows/s, p50, p95, in-flight, held
    assert dom.count('class="bar"') >= 3 + 2 + 2  # tokens, rows by status, HTTP codes


def test_report_of_nothing_says_so(tmp_path, capsys):
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2
    assert "no metrics or progress records" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name", ["<!--<script>", "</script><script>alert(1)</script>", "<img src=x onerror=alert(1)>"]
)
def test_a_model_name_of_markup_stays_data(tmp_path, name):
    """A model's name (or an error's) holding markup cannot end the page's data early
    (``</script>``) nor make the parser swallow the drawing script (``<!--<script>``): the
    embedded JSON has no ``<`` at all, and reads back the same."""
    from dspark_json.report import render_html, report_data

    metrics = tmp_path / "metrics"
    (metrics / "_progress").mkdir(parents=True)
    a_run(metrics)
    for path in (metrics / "_progress").glob("batch-000000-part-*.json"):
        record = json.loads(path.read_text())
        record["models"] = {name: record["models"]["m<x>"]}
        record["errors"] = {name: 3}
        path.write_text(json.dumps(record))
    page = render_html(report_data(str(metrics)))
    embedded = page.split('<script type="application/json" id="data">', 1)[1]
    embedded = embedded.split("</script>", 1)[0]
    assert "<" not in embedded
    assert name in json.loads(embedded)["summary"]["models"]
    assert page.count("<script") == 2


def test_a_token_in_the_metrics_uri_is_not_in_the_page(tmp_path):
    """A metrics directory given with a SAS token (``?sig=``) was the page's title: the token
    was in the HTML three times."""
    metrics = tmp_path / "m?sig=CANARY-SIG-7"
    (metrics / "_progress").mkdir(parents=True)
    a_run(metrics)
    page = tmp_path / "r.html"
    assert main(["report", str(metrics), "-o", str(page)]) == 0
    text = page.read_text()
    assert "CANARY-SIG-7" not in text and "sig=***" in text


def test_a_bad_uri_is_a_message_not_a_traceback(capsys):
    for command in (
        ["metrics", "gs://u:CANARY-PW@bucket/m", "--json"],
        ["report", "gs://u:CANARY-PW@bucket/m", "-o", "x.html"],
    ):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "carries credentials" in err and "Traceback" not in err and "CANARY-PW" not in err


def test_a_page_that_cannot_be_written_says_where(tmp_path, capsys):
    metrics = tmp_path / "metrics"
    (metrics / "_progress").mkdir(parents=True)
    a_run(metrics)
    assert main(["report", str(metrics), "-o", str(tmp_path)]) == 2  # a directory
    err = capsys.readouterr().err
    assert f"cannot write the page to {tmp_path}" in err and "Traceback" not in err
