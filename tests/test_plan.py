"""``dspark-json plan``: the .load() checks without Spark, then what a run would send."""

import json

import pytest

from dspark_json.cli import main
from dspark_json.plan import CHARS_PER_TOKEN, TOKENS_PER_MESSAGE, estimate_tokens
from tests.helpers import write_prompts


def test_estimate_leans_high_per_message():
    messages = [{"role": "user", "content": "x" * 30}]
    assert estimate_tokens(messages) == 30 / CHARS_PER_TOKEN + TOKENS_PER_MESSAGE


def test_plan_counts_requests_after_dedupe_and_bounds_tokens_and_cost(simulator, tmp_path, capsys):
    rows = [{"custom_id": f"r{i}", "prompt": f"Review {i % 5}: ok"} for i in range(12)]
    write_prompts(tmp_path / "prompts", "a.jsonl", rows)
    pricing = {"dspark-sim": {"input": 1.0, "output": 4.0}}
    argv = [
        "plan",
        "--option",
        f"endpoint={simulator.url}",
        "--option",
        f"prompts={tmp_path / 'prompts'}",
        "--option",
        "maxTokens=100",
        "--option",
        "temperature=0",
        "--option",
        f"pricing={json.dumps(pricing)}",
        "--json",
    ]
    assert main(argv) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["model"] == "dspark-sim"  # settled as .load() does, from the server
    assert found["prompts"] == 12
    assert found["requests"] == 5 and found["deduplicated"] == 7  # temperature 0: identical ones
    assert found["output_tokens_bound"] == 500
    expected = (found["prompt_tokens_estimate"] * 1.0 + 500 * 4.0) / 1e6
    assert found["cost_usd_bound"] == pytest.approx(expected)


def test_plan_names_a_bad_option_as_load_does(tmp_path, capsys):
    argv = [
        "plan",
        "--option",
        "endpoint=http://127.0.0.1:9",
        "--option",
        f"prompts={tmp_path}",
        "--option",
        "pricing={oops",
    ]
    assert main(argv) == 2
    assert "Option 'pricing'" in capsys.readouterr().err


def test_python_m_dspark_json_cli_runs_the_command(tmp_path):
    """The guides write ``python -m dspark_json.cli COMMAND``: it ran nothing (exit 0, no
    output) while cli.py had no ``__main__`` block."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "dspark_json.cli", "metrics", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "waiting"


def test_plan_holds_one_partition_of_prompts_at_a_time(simulator, tmp_path):
    """plan read every prompt and built every request into memory before counting (200,000
    prompts: ~300 MB more): it now counts a partition at a time, so four times the prompts
    in four times the files take about the same memory (allocations traced, not timed)."""
    import tracemalloc

    from dspark_json.plan import plan_query

    peaks = []
    for rows in (5_000, 20_000):
        where = tmp_path / f"p{rows}"
        for file in range(rows // 1000):  # a file is read whole, as a task reads its segment
            lines = [{"custom_id": f"{file}-{i}", "prompt": "x" * 50} for i in range(1000)]
            write_prompts(where, f"{file:03d}.jsonl", lines)
        raw = {"endpoint": simulator.url, "prompts": str(where), "partitionSize": "100"}
        plan_query(raw)  # the imports and caches of a first call, untraced
        tracemalloc.start()
        try:
            assert plan_query(raw)["requests"] == rows
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[1] - peaks[0] < 4 << 20, peaks  # 15,000 prompts more held: ~16 MB more
