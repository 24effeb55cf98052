"""The CPU parser before and after a change, side by side in one run, one thread each: two
source trees (a worktree of the base commit, and this one), each parsing the same corpora in
its own processes, the two taking turns (a busy spell of a shared machine falls on both), the
best of each side counted. The tables both give are compared too: equal, bit for bit, or the
run fails.

    git worktree add --detach ../base main
    .venv/bin/python benchmarks/parser_before_after.py --base ../base --rows 20000
    .venv/bin/python benchmarks/parser_before_after.py --base ../base --smoke

Corpora: ``vllm``, ``traffic``, ``review`` (``parser_throughput.py``'s, with its review schema)
and each schema of ``realworld.py`` (maps, free-form values, unions, deep and wide types).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "results"

#: One side's run: the bodies and schema from files, a warm parse (its table written for the
#: comparison), then ``parses`` timed parses on one thread; prints the best CPU seconds.
_SIDE = textwrap.dedent(
    """
    import json, sys, time
    import pyarrow as pa
    import pyarrow.feather as feather
    import dspark_json
    from dspark_json.parse.cpu import CpuParser
    bodies_path, schema_path, table_path, parses = sys.argv[1:5]
    with pa.memory_map(bodies_path) as source:
        bodies = pa.ipc.open_file(source).read_all().column(0).combine_chunks()
    schema = json.loads(open(schema_path).read())
    parser = CpuParser(dspark_json.response_schema(response_format=schema))
    parser.vectorised.threads = 1
    table = parser.parse_vectorised(bodies)
    if table_path != "-":
        feather.write_feather(table, table_path, compression="uncompressed")
    best = float("inf")
    for _ in range(int(parses)):
        started = time.process_time()
        parser.parse_vectorised(bodies)
        best = min(best, time.process_time() - started)
    print(json.dumps({"seconds": best, "reference_rows": parser.reference_rows}))
    """
)


def corpora(rows: int, names: list[str] | None) -> dict[str, tuple[list[str], dict[str, Any]]]:
    """Per corpus name: its bodies and the JSON Schema of its content."""
    sys.path.insert(0, str(HERE))
    import realworld
    from parser_throughput import CONTENT_SCHEMA, corpus

    out: dict[str, tuple[list[str], dict[str, Any]]] = {}
    for kind in ("vllm", "traffic", "review"):
        if not names or kind in names:
            out[kind] = (corpus(rows, kind=kind), CONTENT_SCHEMA)
    for name, schema in realworld.SCHEMAS.items():
        if not names or name in names:
            out[name] = (realworld.bodies(name, rows), schema)
    return out


def side(tree: Path, files: tuple[Path, Path], table: Path | None, parses: int) -> dict[str, Any]:
    """One process of ``tree`` parsing the corpus in ``files``."""
    result: dict[str, Any] = run_in(
        tree, _SIDE, str(files[0]), str(files[1]), str(table or "-"), str(parses)
    )
    return result


def run_in(tree: Path, script: str, *argv: str) -> Any:
    """What ``script`` (Python source, given ``argv``) prints last as JSON, run in a process of
    its own with ``tree``'s dspark_json first on its path: one side of a before/after
    benchmark."""
    env = {**os.environ, "PYTHONPATH": str(tree), "DSPARK_JSON_KEEP_MEMORY": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, *argv],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the tree before the change")
    parser.add_argument("--after", type=Path, default=HERE.parent, help="default: this tree")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3, help="processes per side and corpus")
    parser.add_argument("--parses", type=int, default=5, help="timed parses per process")
    parser.add_argument("--corpus", action="append", help="default: all")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--out", type=Path, default=RESULTS / "parser_before_after")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.rounds, args.parses = 300, 1, 1
    import pyarrow as pa
    from pyarrow import feather

    sides = {"before": args.base.resolve(), "after": args.after.resolve()}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (bodies, schema) in corpora(args.rows, args.corpus).items():
            files = (Path(tmp) / f"{name}.arrow", Path(tmp) / f"{name}.json")
            array = pa.array(bodies, pa.string())
            with pa.OSFile(str(files[0]), "wb") as sink:
                table = pa.table({"body": array})
                with pa.ipc.new_file(sink, table.schema) as writer:
                    writer.write_table(table)
            files[1].write_text(json.dumps(schema))
            megabytes = sum(len(b.encode()) for b in bodies) / 1e6
            best = {label: float("inf") for label in sides}
            reference_rows = {}
            for round_ in range(args.rounds):
                for label, tree in sides.items():
                    table_path = Path(tmp) / f"{name}-{label}.feather" if round_ == 0 else None
                    result = side(tree, files, table_path, args.parses)
                    best[label] = min(best[label], result["seconds"])
                    reference_rows[label] = result["reference_rows"]
            tables = [feather.read_table(Path(tmp) / f"{name}-{label}.feather") for label in sides]
            same = tables[0].equals(tables[1])
            run = {
                "corpus": name,
                "rows": args.rows,
                "megabytes": megabytes,
                **{f"{label}_s": best[label] for label in sides},
                **{f"{label}_mb_per_s": megabytes / best[label] for label in sides},
                "speedup": best["before"] / best["after"],
                "same_table": same,
                "reference_rows": reference_rows,
            }
            runs.append(run)
            print(
                f"{name:16s} {megabytes:6.1f} MB  before {megabytes / best['before']:6.0f} MB/s"
                f"  after {megabytes / best['after']:6.0f} MB/s  x{run['speedup']:.2f}"
                f"  same table: {same}",
                flush=True,
            )
    write(runs, args)
    return 0 if all(r["same_table"] for r in runs) else 1


def write_json(args: argparse.Namespace, script: str, key: str, figures: Any) -> dict[str, Any]:
    """The machine and the two trees compared (``args.base``, ``args.after``), written with
    ``figures`` under ``key`` to ``args.out`` + ``.json``: what a before/after benchmark of this
    folder records beside its figures. Returns the machine's part."""
    meta = {
        "before": _commit(args.base),
        "after": _commit(args.after),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "command": f"python benchmarks/{script} " + " ".join(sys.argv[1:]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(
        json.dumps({"machine": meta, key: figures}, indent=2) + "\n"
    )
    return meta


def header(meta: dict[str, Any], title: str, how: str) -> list[str]:
    """A before/after results page's first lines: ``title`` with the date, the two commits,
    the command and the machine's load, then ``how`` the sides were measured."""
    load = ", ".join(f"{x:.1f}" for x in meta["load_average"])
    return [
        f"# {title}, {meta['date']}",
        "",
        f"Before: {meta['before']}; after: {meta['after']}.",
        "",
        f"Command: `{meta['command']}`. {meta['cpu_cores']} cores shared with other jobs (load "
        f"average {load} at the end): {how}",
        "",
    ]


def write(runs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The results as JSON and Markdown under ``args.out`` (a path without suffix)."""
    meta = write_json(args, "parser_before_after.py", "corpora", runs)
    how = (
        f"each side's best of {args.rounds} processes x {args.parses} parses, one thread, CPU "
        "seconds (`process_time`), the two sides taking turns; the ratio is the figure, the MB/s "
        "are of a loaded machine."
    )
    lines = [
        *header(meta, "The CPU parser before and after", how),
        "| corpus | MB | before MB/s | after MB/s | after / before | same table |",
        "|---|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {r['corpus']} | {r['megabytes']:.1f} | {r['before_mb_per_s']:.0f} | "
        f"{r['after_mb_per_s']:.0f} | {r['speedup']:.2f}x | {'yes' if r['same_table'] else 'NO'} |"
        for r in runs
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def _commit(tree: Path) -> str:
    """The commit ``tree`` has checked out (with ``+`` where its files differ from it)."""

    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(tree), *argv], capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    head = git("log", "-1", "--format=%h %s")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"`{head[:70]}`" + (" +" if dirty else "")


if __name__ == "__main__":
    sys.exit(main())
