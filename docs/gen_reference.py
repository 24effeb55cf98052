"""The reference pages of the docs site, generated from the code at every build.

``docs/hooks.py`` (a MkDocs hook) adds each page of :data:`PAGES` to the site; nothing generated
is committed, so a page cannot go stale. What the code does not say in words is said here, once:
the description of each output column (:data:`COLUMN_DOCS`) and of each metrics-record field
(:data:`METRICS_DOCS`). ``tests/test_site.py`` fails when the code has an option, a column, a
metrics field, an error class or a CLI flag that a page lacks.

Run ``python docs/gen_reference.py DIR`` to write the pages into DIR and read them without MkDocs.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable, Iterator

#: Each output column of the row contract (``dspark_json.rows.COLUMNS``) -> what it holds.
COLUMN_DOCS: dict[str, str] = {
    "_status": "one word per row saying what happened to it (the statuses below)",
    "_rescued_data": (
        "a JSON object of what the schema does not know, and of the values that did not fit "
        "their column, keyed by column path (`metadata`, `parsed.confidence`, "
        "`choices[1].message.audio`); null when nothing was rescued"
    ),
    "_corrupt_record": (
        "the smallest raw text that failed: the body, the content, the arguments or the prompt line"
    ),
    "_error": (
        "why a row has no response: `status` (HTTP), `type` (`response_too_large`, "
        "`endpoint_unavailable`, `model_unavailable`, the server's error type...), `message` and "
        "`attempts`; null where the request succeeded (the types: below)"
    ),
    "_schema_violations": (
        "each `path: message` by which the answer breaks its JSON Schema; `[]` when every JSON "
        "value of the answer was validated and conforms; null when the answer holds no JSON"
    ),
    "_attempts": (
        "every answer of a row that needed a re-ask: its status, why it was re-asked and its "
        "tokens; null where the first answer was right"
    ),
}

#: Each field of a metrics record (``dspark_json.metrics.METRICS_SCHEMA``, nested fields as
#: ``parent.child``) -> what it counts.
METRICS_DOCS: dict[str, str] = {
    "batch": "the micro-batch id (the stream counts its micro-batches in its offsets); null in "
    "`generate()`'s records",
    "offset": "the micro-batch's end offset",
    "offset.file": "the prompt file of the end offset",
    "offset.row": "the row in that file",
    "label": "`generate()`'s records: the stage and task (`generate stage 3 task 1`)",
    "partition": "the Spark partition",
    "at": "when the record was written (ISO 8601, UTC)",
    "machine": "which machine ran the task: a digest of its host name, the same for every task "
    "of one machine (the driver counts a stream's machines from it, to split the pool's room "
    "across them)",
    "source": "where the answers came from: `server`, `journal` (a replay) or `recorded` "
    "(option `responses`)",
    "prompts": "rows in",
    "requests": "chat completion requests sent (re-asks excluded)",
    "retries": "requests sent again after a failure or a rate limit",
    "shed": (
        "requests the pool shed and asked again later (llm-d's 429 with "
        "`x-llm-d-request-dropped-reason`, a gateway's 503 with no endpoint yet)"
    ),
    "deduplicated": "rows answered by another row's identical request (option `dedupe`)",
    "cache_hits": "rows answered from the response cache (option `cache`)",
    "cache_misses": "cacheable requests the cache did not hold",
    "cache_waits": "requests that waited for another task's answer to the same request",
    "http_status": "responses by HTTP status (or by error type where there was none)",
    "latency_ms": "latency of the requests, in milliseconds",
    "latency_ms.p50": "median",
    "latency_ms.p95": "95th percentile",
    "latency_ms.p99": "99th percentile",
    "inflight_limit": "the adaptive limit of requests in flight",
    "inflight_limit.lowest": "its lowest value",
    "inflight_limit.peak": "its highest value",
    "inflight_limit.final": "its value at the end",
    "endpoint_rests": "times an endpoint was rested after failing",
    "held_seconds": "seconds requests were held back by the gate (option `maxServerQueue`) and "
    "the token budgets (options `maxTokensPerMinute`, `maxTokensInFlight`)",
    "prompt_tokens": "prompt tokens of the answers (the rows' `usage`)",
    "cached_tokens": "prompt tokens the server found in its prefix cache "
    "(`usage.prompt_tokens_details`)",
    "completion_tokens": "completion tokens of the answers",
    "backend": "the parser that ran: `cpu` or `gpu`",
    "http_seconds": "seconds of the HTTP phase",
    "parse_seconds": "seconds of the parse",
    "parse_records_per_s": "bodies parsed per second",
    "reference_rows": "rows the row-by-row reference parser took instead of the kernels",
    "reference_reasons": "those rows by reason (`kernels_compiling`, `column_types`, "
    "`envelope_misfit`, `content_misfit`, `values_to_convert`, `extra_choices`, `reader_rules`, "
    "`reader_rejected`, `tool_calls_misfit`)",
    "rows": "rows out by `_status`",
    "dropped": "rows dropped by `mode=DROPMALFORMED`",
    "rescued_rows": "rows with `_rescued_data`",
    "error_rows": "rows with `_error`",
    "new_fields": "field paths that went to `_rescued_data` (schema drift)",
    "repair": "re-asks (option `repairAttempts`)",
    "repair.reasks": "re-asks sent",
    "repair.rows": "rows re-asked",
    "repair.fixed": "rows whose re-ask was right",
    "repair.prompt_tokens": "prompt tokens of the re-asks",
    "repair.completion_tokens": "completion tokens of the re-asks",
    "repair.budget": "the task's share of `repairTokenBudget`",
    "repair.over_budget": "rows not re-asked for want of budget",
    "repair.from_journal": "re-asks read back from the journal on a replay",
    "repair.requests": "requests the re-asks sent",
    "repair.retries": "retries of those requests",
    "repair.spent_tokens": "tokens counted against the budget",
    "repair.estimated_tokens": "tokens estimated for answers without `usage`",
    "models": "by model, where the partition's prompts asked more than one",
    "models.rows": "rows of the model",
    "models.requests": "requests to the model",
    "models.prompt_tokens": "its prompt tokens",
    "models.completion_tokens": "its completion tokens",
    "models.latency_p95_ms": "its 95th percentile latency, in milliseconds",
    "models.cost_usd": "its cost in USD, from option `pricing`; null without a price for it",
    "cost_usd": "the partition's cost in USD (tokens x option `pricing`); null without `pricing`",
}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# --- options -----------------------------------------------------------------------------------


def options_page() -> str:
    from dspark_json.options import options_table

    return f"""# Options

Every option of `spark.readStream.format("dspark-json")` (and of `spark.read`), by the stage that
reads it. Names are case-insensitive; "also accepted" lists other spellings. `generate()` and
`parse_responses()` take the same settings as Python keywords (`max_concurrency=16`).

{options_table()}

Sizing: `maxConcurrency` is per Spark task. vLLM never refuses work (its queue just grows), so
the load on the server is `maxConcurrency` x the number of tasks running at once (at most the
executor cores). Pick it so that this product stays near what the server can batch.
"""


# --- output columns ----------------------------------------------------------------------------


def columns_page() -> str:
    from dspark_json.response.envelope import envelope_fields
    from dspark_json.rows import COLUMNS, ERROR_TYPES, STATUSES

    lines = [
        "# Output columns",
        "",
        "A row out for every prompt in: first the prompt's pass-through fields (`custom_id` "
        "and every other field of the prompt line), then the response envelope, `parsed` (typed "
        "from `responseFormat`), `tool_calls` (with option `tools`), then the system columns. "
        "What `ok` means, and where a value that did not fit goes: "
        "[the row contract](row-contract.md).",
        "",
        "## The response envelope",
        "",
        "Typed from vLLM's and OpenAI's documented shape, whatever the server sends.",
        "",
        "| column | type |",
        "|---|---|",
    ]
    lines += [
        f"| `{f.name}` | `{_cell(f.dataType.simpleString())}` |" for f in envelope_fields(None)
    ]
    lines += [
        "| `parsed` | a struct typed from `responseFormat` (or inferred): the JSON in the first "
        "choice's content |",
        "| `tool_calls` | with option `tools`: the first choice's calls by function name, each "
        "call's `arguments` typed from that function's `parameters` |",
        "",
        "## System columns",
        "",
        "| column | type | added by | what |",
        "|---|---|---|---|",
    ]
    for column in COLUMNS:
        option = f"option `{column.option}`" if column.option else "always"
        doc = COLUMN_DOCS.get(column.name, "")
        lines.append(
            f"| `{column.name}` | `{_cell(column.type.simpleString())}` | {option} | {_cell(doc)} |"
        )
    lines += ["", "## `_status`", "", "| status | meaning |", "|---|---|"]
    lines += [f"| `{word}` | {_cell(meaning)} |" for word, meaning in STATUSES.items()]
    lines += ["", "## `_error.type`", "", "| type | meaning |", "|---|---|"]
    lines += [f"| `{word}` | {_cell(meaning)} |" for word, meaning in ERROR_TYPES.items()]
    lines += [
        "",
        "Any other type is the server's own (`NotFoundError`, `BadRequestError`...), or "
        "`http_<status>` where its body names none.",
    ]
    return "\n".join(lines) + "\n"


# --- metrics -----------------------------------------------------------------------------------


def _split_top(ddl: str) -> Iterator[str]:
    """``a INT, b STRUCT<c: INT, d: INT>`` -> ``a INT``, ``b STRUCT<c: INT, d: INT>``."""
    depth, start = 0, 0
    for i, char in enumerate(ddl):
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == "," and depth == 0:
            yield ddl[start:i].strip()
            start = i + 1
    if ddl[start:].strip():
        yield ddl[start:].strip()


def _name_and_type(field: str) -> tuple[str, str]:
    first = field.split(" ", maxsplit=1)[0]
    name, _, kind = field.partition(":") if ":" in first else field.partition(" ")
    return name.strip().strip("`"), kind.strip()


def metrics_fields() -> list[tuple[str, str]]:
    """Every field of a metrics record, nested ones as ``parent.child``, with its type."""
    from dspark_json.metrics import METRICS_SCHEMA

    found = []
    for field in _split_top(METRICS_SCHEMA):
        name, kind = _name_and_type(field)
        found.append((name, kind))
        inner = kind
        if inner.upper().startswith("MAP<"):  # a map of structs: the struct's fields
            inner = inner[inner.index(",") + 1 : -1].strip()
        if inner.upper().startswith("STRUCT<"):
            for sub in _split_top(inner[len("STRUCT<") : -1]):
                sub_name, sub_kind = _name_and_type(sub)
                found.append((f"{name}.{sub_name}", sub_kind))
    return found


def metrics_page() -> str:
    lines = [
        "# Metrics records",
        "",
        "With option `metrics`, each (micro-batch, partition) writes one JSON record. Read them "
        "as a table with this schema (maps stay maps):",
        "",
        "```python",
        "from dspark_json.metrics import METRICS_SCHEMA",
        "",
        'm = spark.read.schema(METRICS_SCHEMA).json("/data/_metrics/answers")',
        "```",
        "",
        "How to read them, and the driver's line per micro-batch: "
        "[Metrics of a run](../guide/metrics.md).",
        "",
        "| field | type | what |",
        "|---|---|---|",
    ]
    for name, kind in metrics_fields():
        doc = METRICS_DOCS.get(name, "")
        lines.append(f"| `{name}` | `{_cell(kind.lower())}` | {_cell(doc)} |")
    return "\n".join(lines) + "\n"


# --- errors ------------------------------------------------------------------------------------


def error_classes() -> list[type[Exception]]:
    """Every error class dspark-json raises on purpose: the subclasses of DSparkJsonError."""
    import dspark_json
    from dspark_json.errors import DSparkJsonError

    del dspark_json  # imported for its modules' classes to be defined
    found: list[type[Exception]] = [DSparkJsonError]
    for cls in found:
        found += [c for c in cls.__subclasses__() if c not in found]
    return found


def error_fix(cls: type[Exception]) -> tuple[str, str]:
    """(what it means, how to fix it): a class docstring's first paragraph, and the rest."""
    doc = inspect.getdoc(cls) or ""
    what, _, fix = doc.partition("\n\n")
    return " ".join(what.split()), " ".join(fix.split())


def errors_page() -> str:
    lines = [
        "# Errors",
        "",
        "Every error dspark-json raises on purpose is a `dspark_json.DSparkJsonError`. Its "
        "message stands alone (Spark copies it into an `AnalysisException` or a query's "
        "failure text): it names the option or the row, the value and the fix. A row that "
        "fails is not an error: it keeps its place with `_status` and `_error` "
        "([output columns](columns.md)).",
        "",
    ]
    for cls in error_classes():
        what, fix = error_fix(cls)
        bases = ", ".join(f"`{b.__name__}`" for b in cls.__bases__)
        lines += [f"## `{cls.__name__}`", "", f"({bases}) {what}", "", f"**Fix:** {fix}", ""]
    return "\n".join(lines)


# --- CLI ---------------------------------------------------------------------------------------


def cli_commands() -> dict[str, argparse.ArgumentParser]:
    from dspark_json.cli import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def cli_page() -> str:
    from dspark_json.cli import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {a.dest: a.help or "" for a in commands._choices_actions}
    lines = [
        "# Command line",
        "",
        f"`dspark-json COMMAND ...` (or `python -m dspark_json.cli COMMAND ...`): "
        f"{_cell(parser.description or '')}",
        "",
    ]
    for name, sub in commands.choices.items():
        lines += [f"## `dspark-json {name}`", "", _cell(helps.get(name, "")), ""]
        lines += ["| argument | default | what |", "|---|---|---|"]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(f"`{f}`" for f in action.option_strings) or f"`{action.dest}`"
            shown = action.default is not None and action.default is not False
            shown = shown and action.default not in ([], argparse.SUPPRESS)
            default = f"`{action.default}`" if shown else ""
            what = action.help or ""
            if action.choices:
                what = f"{what} (one of {', '.join(map(str, action.choices))})".strip()
            lines.append(f"| {flags} | {_cell(default)} | {_cell(what)} |")
        lines.append("")
    lines.append("The simulator's endpoints and faults in words: [the simulator](simulator.md).")
    return "\n".join(lines) + "\n"


#: Each generated page (its path under docs/) -> the function that writes it.
PAGES: dict[str, Callable[[], str]] = {
    "reference/options.md": options_page,
    "reference/columns.md": columns_page,
    "reference/metrics.md": metrics_page,
    "reference/errors.md": errors_page,
    "reference/cli.md": cli_page,
}


def main(argv: list[str]) -> int:
    from pathlib import Path

    (out,) = argv
    for path, page in PAGES.items():
        target = Path(out) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
