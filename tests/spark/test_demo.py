import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_demo_runs_end_to_end_and_reports(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dspark_json",
            "demo",
            "--rows",
            "24",
            "--workdir",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "streamed 24 rows into Delta table" in out.stdout
    assert "24 requests to the server" in out.stdout
    assert "row status: {'ok': 24}" in out.stdout
    assert "review-00000" in out.stdout
    assert "metrics (records in" in out.stdout and "(1 partition(s))" in out.stdout
    assert "24 rows (ok 24); 0 with errors" in out.stdout
    assert "24 requests, 0 retries; tokens" in out.stdout and "latency p95 " in out.stdout
    # The driver's line for the one micro-batch (Spark's console: stderr).
    assert "INFO dspark_json: batch 0: 24 rows (ok 24)" in out.stderr
    assert "parsed on cpu in" in out.stdout
