"""The live progress: a task's records while its client runs and once it ended, the driver's
totals, the snapshot's figures (ETA, rows/s, cost) and its text."""

import json
import time

import pytest

from dspark_json import progress, report
from dspark_json.cost import parse_pricing
from dspark_json.progress import (
    eta_seconds,
    finished,
    render,
    snapshot,
    summarize,
    task_progress,
    write_batch,
    write_run,
)
from dspark_json.records import watch
from dspark_json.storage import ENVIRONMENT_ONLY


def test_eta_is_what_is_left_at_the_rate_so_far():
    assert eta_seconds(500, 2000, 10.0) == 150.0
    assert eta_seconds(2000, 2000, 10.0) == 0.0
    assert eta_seconds(0, 2000, None) is None  # nothing done: no rate yet
    assert eta_seconds(10, None, 5.0) is None  # no total known


def task(done, prompts, *, started, updated, state="running", **more):
    return {
        "version": 1,
        "kind": "task",
        "batch": 0,
        "partition": 0,
        "state": state,
        "started": started,
        "updated": updated,
        "prompts": prompts,
        "done": done,
        "ok": done,
        "errors": {},
        "requests": done,
        "retries": 0,
        "http_status": {"200": done},
        "tokens": {"input": 10 * done, "output": 2 * done, "cached": 0},
        "held_seconds": 0.5,
        "inflight": 4,
        "models": {},
        "cost_usd": None,
        "samples": [],
        **more,
    }


def test_snapshot_rate_and_eta_from_the_first_task_start():
    run = {"first_batch": 0, "started": 90.0, "prompts": 2000, "trigger": "availableNow"}
    tasks = [
        task(300, 1000, started=100.0, updated=149.0),
        task(200, 1000, started=110.0, updated=149.0),
    ]
    shot = summarize(run, [{"batch": 0, "prompts": 2000}], tasks, now=150.0)
    assert shot["prompts"] == {"done": 500, "total": 2000}
    assert shot["rows_per_second"] == 10.0  # 500 prompts in the 50 s since the first task began
    assert shot["eta_seconds"] == 150.0
    assert shot["state"] == "running"
    assert shot["tokens"] == {"input": 5000, "output": 1000, "cached": 0}
    assert shot["held_seconds"] == 1.0
    assert "ETA 2:30" in render(shot) and "500/2000" in render(shot)


def test_snapshot_finished_when_every_prompt_of_an_available_now_run_is_done():
    run = {"first_batch": 0, "started": 90.0, "prompts": 10, "trigger": "availableNow"}
    tasks = [task(10, 10, started=100.0, updated=104.0, state="done")]
    shot = summarize(run, [], tasks, now=200.0)
    assert shot["state"] == "finished" and shot["eta_seconds"] is None
    assert shot["rows_per_second"] == 2.5  # up to the last record, not to now
    assert "finished" in render(shot).splitlines()[0]


class FakeTally:
    def __init__(self):
        self.done, self.requests, self.retries = 3, 4, 1
        self.statuses = {"200": 3, "429": 1}
        self.failures = {"http_error": 1}
        self.tokens = [30, 9, 6]
        self.model_requests = {"m": 4}
        self.model_tokens = {"m": [30, 9, 6]}


class FakePool:
    held_s = 0.75  # at maxServerQueue's gate and for maxTokensPerMinute / maxTokensInFlight

    def all_limits(self):
        return []


class FakeRun:
    def __init__(self):
        self.stats = FakeTally()
        self.pool = FakePool()


def test_a_task_writes_live_counts_then_its_metrics_record(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "INTERVAL", 0.05)
    metrics = str(tmp_path / "metrics")
    pricing = parse_pricing("pricing", '{"m": {"input": 1, "output": 2, "cached_input": 0.5}}')
    path = tmp_path / "metrics" / "_progress" / "batch-000007-part-00002.json"
    with task_progress(
        metrics,
        storage=ENVIRONMENT_ONLY,
        batch=7,
        partition=2,
        prompts=5,
        model="m",
        pricing=pricing,
    ):
        watch(FakeRun())  # as the client registers its run
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        live = json.loads(path.read_text())
        finished(
            {
                "prompts": 5,
                "rows": {"ok": 4, "not_json": 1},
                "requests": 5,
                "retries": 1,
                "http_status": {"200": 5},
                "prompt_tokens": 50,
                "completion_tokens": 15,
                "cached_tokens": 10,
                "held_seconds": 0.0,
                "inflight_limit": {"final": 4},
                "latency_ms": {"p50": 1.0},
                "models": None,
            }
        )
    assert live["state"] == "running" and live["done"] == 3 and live["ok"] == 2
    assert live["errors"] == {"http_error": 1}
    assert live["tokens"] == {"input": 30, "output": 9, "cached": 6}
    assert live["held_seconds"] == pytest.approx(0.75)  # the gate's and the token budgets'
    assert live["cost_usd"] == pytest.approx((24 * 1 + 6 * 0.5 + 9 * 2) / 1e6)
    final = json.loads(path.read_text())
    assert final["state"] == "done" and final["done"] == 5 and final["ok"] == 4
    assert final["errors"] == {"not_json": 1}
    assert final["cost_usd"] == pytest.approx((40 * 1 + 10 * 0.5 + 15 * 2) / 1e6)
    assert final["models"]["m"]["requests"] == 5
    assert len(final["samples"]) >= 2
    assert progress.well_formed(live) and progress.well_formed(final)  # a task's own: read


def test_snapshot_reads_the_driver_totals_and_skips_earlier_runs(tmp_path):
    metrics = str(tmp_path)
    write_run(
        metrics,
        storage=ENVIRONMENT_ONLY,
        first_batch=3,
        started=1.0,
        prompts=None,
        trigger="stream",
    )
    write_batch(metrics, storage=ENVIRONMENT_ONLY, batch=3, prompts=40, partitions=2)
    write_batch(metrics, storage=ENVIRONMENT_ONLY, batch=2, prompts=999, partitions=9)
    shot = snapshot(metrics)
    assert shot["prompts"] == {"done": 0, "total": 40}
    assert shot["first_batch"] == 3 and shot["trigger"] == "stream"


def test_follow_draws_until_the_run_is_finished_and_show_progress_returns(tmp_path, capsys):
    from dspark_json.cli import main
    from dspark_json.progress import show_progress

    metrics = tmp_path / "metrics"
    write_run(
        str(metrics),
        storage=ENVIRONMENT_ONLY,
        first_batch=0,
        started=1.0,
        prompts=4,
        trigger="availableNow",
        ended=9.0,
    )
    (metrics / "_progress" / "batch-000000-part-00000.json").write_text(
        json.dumps(task(4, 4, started=2.0, updated=6.0, state="done"))
    )
    assert main(["metrics", str(metrics), "--follow", "--interval", "0.01"]) == 0
    drawn = capsys.readouterr().out
    assert "4/4 prompts" in drawn and "finished" in drawn

    class Ended:
        isActive = False

    shot = show_progress(Ended(), str(metrics))
    assert shot["state"] == "finished" and shot["prompts"] == {"done": 4, "total": 4}
    assert "100.0% 4/4 prompts" in capsys.readouterr().err


def test_records_of_the_wrong_types_are_skipped_not_a_crash(tmp_path, capsys):
    """A progress file truncated, edited by hand or written by something else (a string where
    a count goes, NaN, a batch record without its batch) is skipped by metrics --json and the
    report, which read the well-formed ones."""
    from dspark_json.cli import main

    where = tmp_path / "_progress"
    where.mkdir()
    good = {"version": 1, "kind": "task", "batch": 0, "partition": 0, "state": "done",
            "started": 1.0, "updated": 3.0, "prompts": 4, "done": 4, "ok": 4,
            "samples": [[0.0, 4, 4, 0.0, 2]]}  # fmt: skip
    (where / "batch-000000-part-00000.json").write_text(json.dumps(good))
    (where / "batch-000000-part-00001.json").write_text(json.dumps({**good, "done": "5"}))
    (where / "batch-000000-part-00002.json").write_text('{"kind": "task", "ok": NaN}')
    (where / "batch-000000-part-00003.json").write_text('{"kind": "task", "samples": [[1]]}')
    (where / "batch-000000-part-00004.json").write_text('{"kind": "task", "models": {"m": 1}}')
    (where / "batch-000000-part-00005.json").write_text('{"kind": "task", "done": 2')
    (where / "batch-000000.json").write_text('{"kind": "batch"}')
    assert main(["metrics", str(tmp_path), "--json"]) == 0
    shot = json.loads(capsys.readouterr().out)
    assert shot["prompts"]["done"] == 4 and shot["ok"] == 4
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 0
    assert "NaN" not in (tmp_path / "r.html").read_text()


def test_render_writes_no_control_character_of_a_model_name():
    """A model's name is the server's (/v1/models): an escape sequence in it would drive the
    terminal that metrics --follow draws in."""
    task = {"kind": "task", "state": "running", "done": 1, "ok": 1, "started": 1.0,
            "updated": 2.0, "errors": {"x\x1b[2J": 1},
            "models": {"evil\x1b]0;owned\x07": {"done": 1, "requests": 1,
                                                "tokens": {"input": 1, "output": 1}}}}  # fmt: skip
    text = progress.render(progress.summarize(None, [], [task], now=3.0))
    assert "\x1b" not in text and "\x07" not in text and "evil?]0;owned?" in text


def test_metrics_json_of_a_directory_that_does_not_exist_says_so(tmp_path, capsys):
    """A typo in the directory: --json printed 'waiting' (and --follow waited) forever,
    silently."""
    from dspark_json.cli import main

    assert main(["metrics", str(tmp_path / "typo"), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["state"] == "waiting"
    assert "does not exist (yet)" in captured.err
    assert main(["metrics", str(tmp_path), "--json"]) == 0
    assert capsys.readouterr().err == ""


def long_run(metrics, batches, *, first=0, per_batch=2):
    """A streaming run's records, as its driver and tasks leave them: ``batches`` batches of
    ``per_batch`` finished tasks of 10 prompts each, an hour apart."""
    write_run(
        metrics, storage=ENVIRONMENT_ONLY, first_batch=first, started=0.0, prompts=None,
        trigger="stream",
    )  # fmt: skip
    for batch in range(first, first + batches):
        write_batch(metrics, storage=ENVIRONMENT_ONLY, batch=batch, prompts=10 * per_batch,
                    partitions=per_batch)  # fmt: skip
        for part in range(per_batch):
            record = task(
                10, 10, started=3600.0 * batch, updated=3600.0 * batch + 60, state="done",
                batch=batch, partition=part, cost_usd=0.25,
                models={"m": {"done": 10, "requests": 10, "cost_usd": 0.25,
                              "tokens": {"input": 100, "output": 20, "cached": 0}}},
                samples=[[0.0, 0, 0, 0.0, 4], [60.0, 10, 10, 0.5, 4]],
            )  # fmt: skip
            progress._put(metrics, progress._task_name(batch, part), record, ENVIRONMENT_ONLY)


def shown(shot):
    """A snapshot's figures that do not move with the clock."""
    return {k: v for k, v in shot.items() if k not in ("elapsed_seconds", "rows_per_second")}


def test_a_long_run_keeps_a_few_batches_of_records_and_the_same_figures(tmp_path):
    """A stream of many micro-batches: at planning, the driver folds the batches older than
    KEEP_BATCHES into one rollup record and deletes them; the snapshot (metrics --json, the
    Prometheus counters, the report) says what it said before, and the directory holds a few
    batches, not all of them."""
    metrics = str(tmp_path)
    long_run(metrics, 30, first=5)
    progress._put(
        metrics,
        progress._task_name(2, 0),
        task(7, 7, started=1.0, updated=2.0, batch=2),
        ENVIRONMENT_ONLY,
    )  # fmt: skip  (an earlier run's)
    before = snapshot(metrics, now=200_000.0)
    assert before["batches"] == 30 and before["prompts"] == {"done": 600, "total": 600}
    for planning in range(6, 36):  # each planning call, as the driver makes them
        progress.compact(metrics, storage=ENVIRONMENT_ONLY, batch=planning, first_batch=5)
    names = sorted(p.name for p in (tmp_path / "_progress").iterdir())
    assert "rollup.json" in names and "batch-000002-part-00000.json" not in names
    # run.json, the rollup, 7 batches of 3 files (batch 35, being planned, is the eighth)
    assert len(names) == 2 + 3 * (progress.KEEP_BATCHES - 1)
    after = snapshot(metrics, now=200_000.0)
    assert shown(after) == shown(before)
    assert after["tasks"] == {"running": 0, "done": 60}
    assert after["cost_usd"] == pytest.approx(15.0)
    assert after["models"]["m"]["tokens"]["input"] == 6000
    series = report.over_time(progress.task_records(metrics))
    assert series["rows_per_second"] and max(r for _, r in series["rows_per_second"]) > 0


def test_a_rollup_written_before_its_files_were_deleted_counts_them_once(tmp_path):
    """The driver died between writing the rollup and deleting what it folded: snapshots skip
    the files the rollup covers, and the next planning deletes them."""
    metrics = str(tmp_path)
    long_run(metrics, 20)
    before = shown(snapshot(metrics, now=100_000.0))
    saved = {p.name: p.read_bytes() for p in (tmp_path / "_progress").iterdir()}
    progress.compact(metrics, storage=ENVIRONMENT_ONLY, batch=19, first_batch=0)
    for name, data in saved.items():  # as if none had been deleted
        (tmp_path / "_progress" / name).write_bytes(data) if name != "rollup.json" else None
    assert shown(snapshot(metrics, now=100_000.0)) == before
    progress.compact(metrics, storage=ENVIRONMENT_ONLY, batch=20, first_batch=0)
    assert shown(snapshot(metrics, now=100_000.0)) == before
    assert not (tmp_path / "_progress" / "batch-000003-part-00000.json").exists()


def test_a_new_run_in_the_same_directory_starts_a_new_rollup(tmp_path):
    metrics = str(tmp_path)
    long_run(metrics, 12)
    progress.compact(metrics, storage=ENVIRONMENT_ONLY, batch=12, first_batch=0)
    long_run(metrics, 12, first=40, per_batch=1)  # the query restarted: batches 40-51
    progress.compact(metrics, storage=ENVIRONMENT_ONLY, batch=52, first_batch=40)
    shot = snapshot(metrics, now=300_000.0)
    assert shot["batches"] == 12 and shot["prompts"]["done"] == 120
    assert not (tmp_path / "_progress" / "batch-000011-part-00000.json").exists()
