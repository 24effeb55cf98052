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
    assert "metrics (1 partitions, records in" in out.stdout
    assert "24 requests, 0 retries, latency p95 up to" in out.stdout
    assert "parsed on cpu in" in out.stdout
