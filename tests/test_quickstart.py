"""The quick start runs as written (the README's, which docs/getting-started/local.md holds too):
its first code block, copied into a file and run by
this virtualenv's Python in a fresh process whose ``PATH`` and environment do not lead to the
virtualenv (a new user's shell, where ``python3`` is another Python): the simulator starts, the
stream lands in Delta, the table reads back through Spark SQL, the driver logs the batch's
line."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LOCAL = ROOT / "docs" / "getting-started" / "local.md"


def quick_start(path: Path = README) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```\n", start)]


def test_the_readme_quick_start_runs_as_written(tmp_path):
    script = tmp_path / "quickstart.py"
    script.write_text(quick_start())
    venv_bin = str(Path(sys.executable).parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "VIRTUAL_ENV", "PYTHONPATH", "SPARK_"))
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert "INFO dspark_json: batch 0: 20 rows (ok 20); 0 with errors" in out.stderr
    table = [line for line in out.stdout.splitlines() if line.startswith("|")]
    assert [c.strip() for c in table[0].split("|")[1:4]] == ["sentiment", "n", "score"]
    counts = {cells[1].strip(): int(cells[2]) for cells in (r.split("|") for r in table[1:])}
    assert sum(counts.values()) == 20 and set(counts) <= {"positive", "neutral", "negative"}
    assert (tmp_path / "work" / "answers" / "_delta_log").is_dir()
