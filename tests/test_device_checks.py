"""benchmarks/gpu/device_checks.sh, the one script a session lent a GPU runs, kept valid here
without a device: what it names exists, its pytest runs collect, its benchmark takes the flags it
passes, so device time goes to measuring rather than to a path that moved."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "device_checks.sh"


def _commands(script: str) -> list[list[str]]:
    """The script's commands (comments dropped, continuation lines joined), split into words;
    pipes cut each one at its first stage."""
    joined = re.sub(r"\\\n\s*", " ", script)
    lines = [line.split(" | ")[0] for line in joined.splitlines()]
    commands = [
        shlex.split(line) for line in lines if line.strip() and not line.lstrip().startswith("#")
    ]
    # A step bounded by ``timeout SECONDS`` is the command after it.
    return [c[2:] if c[:1] == ["timeout"] and c[1:2] and c[1].isdigit() else c for c in commands]


def _pytest_runs(script: str) -> list[list[str]]:
    """The arguments of each ``python3 -m pytest`` command, options and shell redirections
    dropped."""
    runs = []
    for words in _commands(script):
        if words[:3] == ["python3", "-m", "pytest"]:
            args = [w for w in words[3:] if not w.startswith("-") and not w.startswith("2>")]
            runs.append([w for w in args if w not in {"no:cacheprovider"}])
    return runs


def _benchmark_runs(script: str) -> list[list[str]]:
    """Each ``python3 benchmarks/....py ...`` command: the script, then its arguments."""
    return [
        w[1:]
        for w in _commands(script)
        if len(w) > 1 and w[0] == "python3" and w[1].startswith("benchmarks/")
    ]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python args...`` from the repository's root, its output kept."""
    cmd = [sys.executable, *args]
    return subprocess.run(cmd, check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_every_test_it_runs_exists_and_collects():
    runs = _pytest_runs(SCRIPT.read_text())
    assert runs, "device_checks.sh runs no pytest: the parser's tests are what it is for"
    for paths in runs:
        for path in paths:
            assert (ROOT / path.split("::")[0]).exists(), f"device_checks.sh runs {path}: gone"
        done = _run("-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert re.search(r"\b[1-9]\d* tests? collected", done.stdout), done.stdout[-500:]


def test_every_benchmark_it_runs_takes_the_flags_it_passes():
    runs = _benchmark_runs(SCRIPT.read_text())
    assert runs, "device_checks.sh runs no benchmark"
    for script, *args in runs:
        assert (ROOT / script).exists(), f"device_checks.sh runs {script}: gone"
        done = _run(script, "--help")
        assert done.returncode == 0, done.stderr[-2000:]
        for flag in (a for a in args if a.startswith("--")):
            assert flag in done.stdout, f"{script} --help does not offer {flag}"


def test_what_its_probe_asks_of_the_gpu_backend_is_there():
    """The ``python3 -c`` line imports cuDF (absent here) and calls the backend's module."""
    from dspark_json.parse import gpu

    snippets = [w[2] for w in _commands(SCRIPT.read_text()) if w[:2] == ["python3", "-c"]]
    assert any("dspark_json.parse.gpu as g" in s for s in snippets)
    for snippet in snippets:
        for name in re.findall(r"\bg\.(\w+)", snippet):
            assert hasattr(gpu, name), f"device_checks.sh calls dspark_json.parse.gpu.{name}"


@pytest.mark.parametrize(
    ("script", "runs"),
    [
        ("python3 -m pytest -q tests/test_gone.py \\\n  2>&1 | tail", [["tests/test_gone.py"]]),
        ("# python3 -m pytest tests/a.py\necho", []),
        ("timeout 60 python3 -m pytest -q tests/b.py 2>&1 | tail", [["tests/b.py"]]),
    ],
)
def test_the_script_reader_finds_the_pytest_runs(script, runs):
    assert _pytest_runs(script) == runs
