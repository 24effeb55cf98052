"""What the stages read of the answers (issue 44, "nothing parses a body twice"): the bodies
decoded again (before) vs read from the table the parser already returned (now), side by side
in one run.

    .venv/bin/python benchmarks/answer_reads.py              # writes results/answer_reads.{md,json}
    .venv/bin/python benchmarks/answer_reads.py --smoke      # tiny sizes

Simulator answers (``Simulator._chat``, its seeded review-like JSON Schema answers, a fifth of
them broken as ``benchmarks/repair.py`` breaks them) are parsed once by the CPU backend, as the
pipeline does. Then, each timed (CPU time, ``time.process_time``, and wall; the median of
``--repeat`` runs, contenders in turns):

- ``validateSchema``: every row's content validated against the JSON Schema, the contents read
  from the bodies (``decode_answer`` per body, the body decoding the validator did before) or
  from the table (``read_answers``); and those reads alone, without jsonschema;
- the re-asks' answer reads: the wrong rows' answers (content, finish_reason, refusal, usage),
  from their bodies or from the table. Before, each wrong row's body was decoded at least twice
  (the first answer's price, then its plan) and each re-ask's twice more; the figure is one read.

The parse itself is timed once for scale; it runs either way.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from repair import BROKEN  # a fifth of first answers broken, as the re-ask benchmark breaks them

from dspark_json.dev.simulator import Simulator
from dspark_json.parse import make_parser
from dspark_json.response.answers import decode_answer, read_answers
from dspark_json.rows import STATUS, Status
from dspark_json.schema.output import output_schema, response_fields
from dspark_json.schema.validation import schema_violations

RESULTS = Path(__file__).parent / "results"
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "rating": {"type": "integer", "minimum": 1, "maximum": 5},
        "pros": {"type": "array", "items": {"type": "string"}},
        "cons": {"type": "array", "items": {"type": "string"}},
        "summary": {"type": "string", "maxLength": 200},
    },
    "required": ["title", "rating", "summary"],
}


def bodies(rows: int) -> list[str]:
    """``rows`` simulator answers to distinct prompts."""
    simulator = Simulator(seed=1, faults=BROKEN)
    out = []
    for i in range(rows):
        request = {
            "model": simulator.model,
            "messages": [{"role": "user", "content": f"Review product {i}."}],
            "max_tokens": 160,
            "response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}},
        }
        status, payload = simulator._chat(json.dumps(request).encode())
        assert status == 200
        out.append(json.dumps(payload))
    return out


def timed(work: Callable[[], Any]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows, repeat = (500, 2) if args.smoke else (args.rows, args.repeat)

    texts = bodies(rows)
    column = pa.array(texts, pa.large_string())
    parse = make_parser(response_fields(output_schema(response_format=SCHEMA)), "cpu")
    parse.parse(column)  # kernels compiled
    parse_cpu, parse_wall = timed(lambda: parse.parse(column))
    table = parse.parse(column)
    statuses = table.column(STATUS.name).to_pylist()
    wrong = [i for i, s in enumerate(statuses) if s not in (None, Status.OK)]

    def validate_bodies() -> Any:
        return schema_violations(SCHEMA, [decode_answer(b).content for b in column.to_pylist()])

    def validate_table() -> Any:
        return schema_violations(SCHEMA, [a.content for a in read_answers(table, column)])

    def reask_bodies() -> Any:
        return [decode_answer(b) for b in column.take(pa.array(wrong)).to_pylist()]

    def reask_table() -> Any:
        return read_answers(table, column, wrong)

    assert validate_bodies() == validate_table() and reask_bodies() == reask_table()
    contenders = {
        "validateSchema's reads alone, bodies decoded (before)": lambda: [
            decode_answer(b) for b in column.to_pylist()
        ],
        "validateSchema's reads alone, the parser's table (now)": lambda: read_answers(
            table, column
        ),
        "validateSchema, bodies decoded (before)": validate_bodies,
        "validateSchema, the parser's table (now)": validate_table,
        "re-ask reads, bodies decoded (before)": reask_bodies,
        "re-ask reads, the parser's table (now)": reask_table,
    }
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, work in contenders.items():
            runs[name].append(timed(work))
    figures = {
        name: {
            "cpu_s": statistics.median(c for c, _ in done),
            "wall_s": statistics.median(w for _, w in done),
        }
        for name, done in runs.items()
    }
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": platform.platform(),
        "rows": rows,
        "wrong_rows": len(wrong),
        "repeat": repeat,
        "parse": {"cpu_s": parse_cpu, "wall_s": parse_wall},
        "figures": figures,
    }
    lines = [
        f"# Answer reads: bodies decoded vs the parser's table ({rows:,} answers, "
        f"{len(wrong):,} wrong; median of {repeat})",
        "",
        f"The parse itself (runs either way): {parse_cpu:.3f} s CPU, {parse_wall:.3f} s wall.",
        "",
        "| read | CPU s | wall s |",
        "|---|---:|---:|",
        *(f"| {name} | {f['cpu_s']:.3f} | {f['wall_s']:.3f} |" for name, f in figures.items()),
        "",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "answer_reads.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "answer_reads.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
