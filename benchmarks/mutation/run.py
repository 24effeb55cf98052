"""Mutation testing of the core modules (issue 20): ``make mutate``.

    .venv/bin/python benchmarks/mutation/run.py             # fresh run, then the report
    .venv/bin/python benchmarks/mutation/run.py --jobs 4    # mutants tested 4 at a time
    .venv/bin/python benchmarks/mutation/run.py --report    # the report from mutants/ as it is

mutmut (configured in pyproject's ``[tool.mutmut]``) copies the package and the tests into
``mutants/``, makes every mutant of the core modules' functions, rejects with mypy those the type
check catches, and runs for each mutant the fast tests (no Spark) that call the mutated function.
A run always starts from an empty ``mutants/``: mutmut keeps a survivor's verdict between runs
and would not retest it against new tests.

The report (``benchmarks/results/mutation.md`` and ``.json``) gives per module the mutants, how
they were caught, the survivors with their change, and the score:

    score = (killed by a test + caught by mypy + timed out) / (mutants - equivalent)

An equivalent mutant changes no behaviour a test could observe; each one is listed in
``equivalent.toml`` with its reason, matched by module, function and changed lines (not by
number: mutmut numbers a function's mutants in order, so they shift as the code changes), or by
module and function alone where no mutant of that function can change behaviour. An entry with
``equivalent = false`` explains a survivor that is not equivalent (a known gap): it still counts
against the score. The figures before the tests of issue 20 were added are in ``baseline.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RESULTS = ROOT / "benchmarks" / "results"
BIN = Path(sys.executable).parent

#: mutmut's exit codes per mutant -> what the report calls them.
_VERDICTS = {
    1: "killed",
    3: "killed",
    37: "mypy",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    -9: "timeout",  # killed at mutmut's CPU-time limit
    -11: "crashed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    None: "not checked",
}
_CAUGHT = ("killed", "mypy", "timeout", "crashed")


@dataclass
class Module:
    path: str
    verdicts: Counter[str] = field(default_factory=Counter)
    survivors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.verdicts.values())

    @property
    def caught(self) -> int:
        return sum(self.verdicts[v] for v in _CAUGHT)

    @property
    def equivalent(self) -> int:
        return sum(1 for s in self.survivors if s["reason"] and s["equivalent"])

    @property
    def tests_score(self) -> float | None:
        """The same without the mutants mypy rejects: what the tests alone catch."""
        judged = self.total - self.equivalent - self.verdicts["skipped"] - self.verdicts["mypy"]
        caught = self.caught - self.verdicts["mypy"]
        return 100.0 * caught / judged if judged else None

    @property
    def score(self) -> float | None:
        judged = self.total - self.equivalent - self.verdicts["skipped"]
        return 100.0 * self.caught / judged if judged else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested at once")
    parser.add_argument("--report", action="store_true", help="only write the report")
    args = parser.parse_args()
    os.chdir(ROOT)
    info_path = ROOT / "mutants" / "run-info.json"
    if not args.report:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
        (ROOT / "mutants").mkdir()
        info = _tree_info()
        started = time.monotonic()
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        command = [str(BIN / "mutmut"), "run", "--max-children", str(args.jobs)]
        with open(ROOT / "mutants" / "mutmut.log", "wb") as log:
            done = subprocess.run(
                command, check=False, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        info["seconds"] = round(time.monotonic() - started)
        info["jobs"] = args.jobs
        info_path.write_text(json.dumps(info, indent=2))
        if done.returncode != 0:
            sys.exit(f"mutmut failed ({done.returncode}); see mutants/mutmut.log")
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    modules = collect()
    baseline = json.loads((HERE / "baseline.json").read_text())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "mutation.json").write_text(json.dumps(_as_json(modules, info), indent=2) + "\n")
    (RESULTS / "mutation.md").write_text(render(modules, info, baseline))
    for m in modules:
        score = "-" if m.score is None else f"{m.score:.1f}%"
        print(f"{m.path:36} {m.total:5} mutants  {score:>6}  survivors {len(m.survivors)}")
    print(f"report: {(RESULTS / 'mutation.md').relative_to(ROOT)}")


def _tree_info() -> dict[str, Any]:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], check=False, capture_output=True, text=True, cwd=ROOT)
        return out.stdout.strip()

    changed = [line[3:] for line in git("status", "--porcelain").splitlines()]
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "changed": [p for p in changed if p.startswith(("dspark_json/", "tests/"))],
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def collect() -> list[Module]:
    """Every core module's verdicts, from mutmut's files under mutants/."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    equivalents = tomllib.loads((HERE / "equivalent.toml").read_text()).get("equivalent", [])
    modules = []
    for path in config["only_mutate"]:
        meta = ROOT / "mutants" / f"{path}.meta"
        if not meta.exists():
            continue
        module = Module(path)
        exit_codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
        for name, code in sorted(exit_codes.items(), key=lambda kv: _order(kv[0])):
            verdict = _VERDICTS.get(code, "suspicious")
            module.verdicts[verdict] += 1
            if verdict in _CAUGHT:
                continue
            diff = get_diff_for_mutant(name, path=path)
            removed, added = _changes(diff)
            function = _function(name)
            entry = next(
                (e for e in equivalents if _matches(e, path, function, removed, added)), None
            )
            if verdict != "survived":
                entry = None  # only a survivor can be equivalent
            module.survivors.append(
                {
                    "mutant": name,
                    "verdict": verdict,
                    "function": function,
                    "removed": removed,
                    "added": added,
                    "reason": entry["reason"] if entry else None,
                    "equivalent": entry.get("equivalent", True) if entry else False,
                }
            )
        modules.append(module)
    return modules


def _matches(
    entry: dict[str, Any], path: str, function: str, removed: list[str], added: list[str]
) -> bool:
    """Whether an ``equivalent.toml`` entry covers a survivor: same module and function, and
    the same changed lines, or any change where the entry names none (a whole function)."""
    if (entry["module"], entry["function"]) != (path, function):
        return False
    if "removed" not in entry and "added" not in entry:
        return True
    return [line.strip() for line in entry.get("removed", [])] == removed and [
        line.strip() for line in entry.get("added", [])
    ] == added


def _order(name: str) -> tuple[str, int]:
    head, _, number = name.rpartition("__mutmut_")
    return head, int(number) if number.isdigit() else 0


def _function(mutant: str) -> str:
    """``m.xǁClassǁmethod__mutmut_3`` -> ``Class.method``; ``m.x_f__mutmut_1`` -> ``f``."""
    name = mutant.rpartition(".")[2].rpartition("__mutmut_")[0]
    if name.startswith("x_"):
        return name[2:]
    return ".".join(name.split("ǁ")[1:])


def _changes(diff: str) -> tuple[list[str], list[str]]:
    lines = [line for line in diff.splitlines() if not line.startswith(("---", "+++", "@@"))]
    removed = [line[1:].strip() for line in lines if line.startswith("-")]
    added = [line[1:].strip() for line in lines if line.startswith("+")]
    return removed, added


def _as_json(modules: list[Module], info: dict[str, Any]) -> dict[str, Any]:
    return {
        "run": info,
        "modules": {
            m.path: {
                "mutants": m.total,
                **dict(m.verdicts),
                "equivalent": m.equivalent,
                "score": None if m.score is None else round(m.score, 1),
                "tests only": None if m.tests_score is None else round(m.tests_score, 1),
            }
            for m in modules
        },
    }


def render(modules: list[Module], info: dict[str, Any], baseline: dict[str, Any]) -> str:
    before = baseline["modules"]
    out = [
        "# Mutation testing",
        "",
        "Written by `make mutate` (`benchmarks/mutation/run.py`, mutmut; configuration in",
        "pyproject's `[tool.mutmut]`). Each mutant is one small change to a core module's",
        "function (an operator, a constant, an argument, a condition); a test that then fails",
        "kills it. Score = (killed by a test + caught by mypy + timed out) / (mutants -",
        "equivalent); *tests only* is the same without the mutants mypy rejects (`make lint`",
        "runs mypy strict, so those never reach a user). Equivalent survivors (no test can tell",
        "them apart) are listed with their reason from `benchmarks/mutation/equivalent.toml`; a",
        "survivor marked **not killed** is a known gap and counts against the score.",
        "",
        f"Run: {info.get('started', '?')}, commit {info.get('commit', '?')}"
        + (
            f" plus uncommitted changes to {len(info['changed'])} file(s)"
            if info.get("changed")
            else ""
        )
        + f"; {info.get('seconds', 0) // 60} min {info.get('seconds', 0) % 60} s"
        + f" with {info.get('jobs', 1)} job(s).",
        f"*Before*: before the tests of issue 20 (items 3-4), {baseline['run']}.",
        "",
        "| module | mutants | killed | mypy | timeout | survived (equivalent) | no tests "
        "| score | before | tests only | before |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    total = Module("all")
    for m in modules:
        total.verdicts.update(m.verdicts)
        total.survivors.extend(m.survivors)
        out.append(_row(m, before.get(m.path)))
    for path, was in before.items():  # modules since moved or split
        if path != "all" and path not in {m.path for m in modules}:
            cells = [f"{path} (gone)", *["-"] * 6, "-", _pct(was.get("score")), "-"]
            out.append("| " + " | ".join([*cells, _pct(was.get("tests only"))]) + " |")
    out.append(_row(total, before.get("all"), bold=True))
    out += ["", "## Survivors", ""]
    for m in modules:
        if not m.survivors:
            continue
        out += [f"### {m.path}", ""]
        for s in m.survivors:
            change = " / ".join(
                [*(f"`- {line}`" for line in s["removed"]), *(f"`+ {line}`" for line in s["added"])]
            )
            if not s["reason"]:
                why = f"**{s['verdict']}, no reason given**"
            elif s["equivalent"]:
                why = f"equivalent: {s['reason']}"
            else:
                why = f"**not killed**: {s['reason']}"
            out.append(f"- `{s['function']}`: {change} — {why}")
        out.append("")
    return "\n".join(out)


def _row(m: Module, before: dict[str, Any] | None, *, bold: bool = False) -> str:
    v = m.verdicts
    survived = v["survived"] + v["suspicious"] + v["not checked"]

    before = before or {}
    cells = [
        m.path,
        str(m.total),
        str(v["killed"]),
        str(v["mypy"]),
        str(v["timeout"] + v["crashed"]),
        f"{survived} ({m.equivalent})",
        str(v["no tests"]),
        _pct(m.score),
        _pct(before.get("score")),
        _pct(m.tests_score),
        _pct(before.get("tests only")),
    ]
    if bold:
        cells = [f"**{c}**" for c in cells]
    return "| " + " | ".join(cells) + " |"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


if __name__ == "__main__":
    main()
