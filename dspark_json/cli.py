"""The ``dspark-json`` command: ``simulate``, ``demo``, ``schema``, ``metrics``, ``report`` and
``plan``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "main"]

#: What ``dspark-json --help`` says first (plain text: argparse shows it as it is).
DESCRIPTION = (
    "dspark-json: prompts to a vLLM / OpenAI-compatible server, the answers as typed Spark "
    "columns. Commands: simulate (a vLLM-compatible server), demo (a stream into Delta), "
    "schema (the schema a query gets), metrics (a run's summary and live progress from its "
    "metrics directory), report (a run as one HTML page), plan (what a query would send and "
    "cost, without Spark)."
)


def _first_fault_flags(sim: argparse.ArgumentParser) -> None:
    first = sim.add_argument_group(
        "first-answer faults a re-ask (repairAttempts) fixes (seeded; rates are per prompt, "
        "exclusive)"
    )
    first.add_argument(
        "--first-truncated-rate",
        type=float,
        default=0.0,
        help="cut the first answer at max_tokens (finish_reason length) until asked with more",
    )
    first.add_argument(
        "--first-broken-rate",
        type=float,
        default=0.0,
        help="first answer of broken JSON, until a re-ask shows it the answer and a message",
    )
    first.add_argument(
        "--first-prose-rate",
        type=float,
        default=0.0,
        help="first answer of prose, until a re-ask shows it the answer and a message",
    )
    first.add_argument(
        "--first-invalid-rate",
        type=float,
        default=0.0,
        help="first answer leaves out a required property, until a later message names it",
    )


def _gateway_flags(sim: argparse.ArgumentParser) -> None:
    gateway = sim.add_argument_group("a gateway in front, and its rate limit")
    gateway.add_argument(
        "--gateway",
        choices=["litellm", "llm-d"],
        help="litellm: answer as LiteLLM's proxy in front: /health sends a completion per model "
        "(500 without the key), a wrong key is 400 'No connected db', provider_specific_fields "
        "in each choice and message, 429s hinted by llm_provider-retry-after. llm-d: as llm-d's "
        "inference gateway: sheddable objectives (--objective) shed with a 429 and "
        "x-llm-d-request-dropped-reason while requests wait; 503 'no healthy upstream' while "
        'no backend (--no-backend, POST /gateway/backends {"ready": true})',
    )
    gateway.add_argument(
        "--objective",
        action="append",
        default=[],
        metavar="NAME=PRIORITY",
        help="llm-d: an InferenceObjective and its priority (negative: sheddable); repeatable",
    )
    gateway.add_argument(
        "--shed-queue",
        type=int,
        default=0,
        help="llm-d: shed sheddable requests once the pool is at --capacity and this many wait",
    )
    gateway.add_argument(
        "--no-backend", action="store_true", help="llm-d: start with no backend (scaled to zero)"
    )
    gateway.add_argument("--rpm", type=int, help="completions per --rate-window; the rest 429")
    gateway.add_argument("--rate-window", type=float, default=60.0, help="seconds (--rpm)")


def _tool_fault_flags(sim: argparse.ArgumentParser) -> None:
    tool = sim.add_argument_group("tool-call faults (seeded; rates are per call, exclusive)")
    tool.add_argument(
        "--tool-broken-rate", type=float, default=0.0, help="arguments that are not JSON"
    )
    tool.add_argument(
        "--tool-drift-rate", type=float, default=0.0, help="arguments with a key not in the tool"
    )
    tool.add_argument(
        "--tool-unknown-rate", type=float, default=0.0, help="a call of a function not offered"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line: every command and its flags."""
    parser = argparse.ArgumentParser(prog="dspark-json", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)

    sim = commands.add_parser("simulate", help="run the vLLM-compatible simulator")
    sim.add_argument("--host", default="127.0.0.1", help="address to listen on")
    sim.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    sim.add_argument("--seed", type=int, default=0, help="seed of the answers and the faults")
    sim.add_argument(
        "--model",
        "--served-model-name",
        default="dspark-sim",
        help="the model(s) served, comma-separated: each name is a model of its own (vLLM's "
        "--served-model-name gives one model several aliases)",
    )
    sim.add_argument("--latency", type=float, default=0.0, help="seconds per completion")
    faults = sim.add_argument_group("faults (seeded; rates are per completion request)")
    faults.add_argument(
        "--fail", action="append", default=[], metavar="STATUS=RATE", help="e.g. 429=0.1"
    )
    faults.add_argument(
        "--error-shape",
        choices=["nested", "flat"],
        default="nested",
        help="error bodies as OpenAI's {\"error\": {...}} (nested) or vLLM's older flat object",
    )
    faults.add_argument("--retry-after", help="Retry-After sent with 429/503 (s or HTTP date)")
    faults.add_argument("--retry-after-ms", type=int, help="retry-after-ms sent with 429/503")
    faults.add_argument(
        "--slow-rate", type=float, default=0.0, help="share of answers delayed by --slow-seconds"
    )
    faults.add_argument(
        "--slow-seconds", type=float, default=5.0, help="extra seconds of a slow answer"
    )
    faults.add_argument("--reset-rate", type=float, default=0.0, help="close without answering")
    faults.add_argument("--truncate-rate", type=float, default=0.0, help="cut the body short")
    faults.add_argument("--malformed-rate", type=float, default=0.0, help="cut the content")
    faults.add_argument("--capacity", type=int, help="completions at once; the rest queue")
    faults.add_argument(
        "--scheduling-policy",
        choices=["fcfs", "priority"],
        default="fcfs",
        help="the queue's order: arrival, or (request priority, arrival) as vLLM's flag; with "
        "fcfs a non-zero priority is a 400",
    )
    faults.add_argument("--vary", action="store_true", help="answer a repeated request differently")
    faults.add_argument("--drift-after", type=int, help="after N answers, add unexpected fields")
    faults.add_argument("--served-schema", help="JSON Schema text served at /health/json-schema")

    _first_fault_flags(sim)
    _tool_fault_flags(sim)
    _gateway_flags(sim)
    faults.add_argument(
        "--api-key-env", metavar="NAME", help="require the key held by this environment variable"
    )
    engine = sim.add_argument_group(
        "the model's time and vLLM's prefix cache (off by default; --capacity bounds the "
        "sequences at once, as vLLM's max_num_seqs)"
    )
    engine.add_argument(
        "--cache-blocks",
        type=int,
        help="KV blocks kept for prompt prefixes (LRU); reports cached_tokens in usage",
    )
    engine.add_argument("--block-size", type=int, default=16, help="tokens per KV block")
    engine.add_argument(
        "--prefill-ms", type=float, default=0.0, help="ms per prompt token not cached"
    )
    engine.add_argument("--decode-ms", type=float, default=0.0, help="ms per output token")

    demo = commands.add_parser("demo", help="stream sample prompts through the simulator to Delta")
    demo.add_argument("--rows", type=int, default=300, help="sample prompts to send")
    demo.add_argument(
        "--workdir",
        default="demo-output",
        help="folder for the prompts, the table and the checkpoint (emptied first)",
    )
    demo.add_argument(
        "--parse-mode",
        default="auto",
        choices=["auto", "cpu", "gpu"],
        help="option parseMode: where the answers are parsed",
    )

    schema = commands.add_parser(
        "schema", help="print the schema a query gets (tree and DDL), to pin it"
    )
    schema.add_argument("--endpoint", help="the model server (for sampling or schemaEndpoint)")
    schema.add_argument("--response-format", help="a JSON Schema file (or the JSON itself)")
    schema.add_argument("--schema-endpoint", help="path or URL of the server's JSON Schema")
    schema.add_argument("--prompts", help="the prompt directory (pass-through columns, samples)")
    schema.add_argument("--responses", help="a directory of recorded answers to infer from")
    schema.add_argument("--samples", default="8", help="answers to infer `parsed` from")
    schema.add_argument("--schema-hints", help="DDL hints, e.g. 'parsed.score DOUBLE'")
    schema.add_argument("--model", help="the model to sample (option model)")
    schema.add_argument("--api-key-env", help="environment variable holding the API key")

    _run_commands(commands)
    return parser


def _run_commands(commands: Any) -> None:
    """The commands about a run: metrics (and its progress), report, plan."""
    metrics = commands.add_parser(
        "metrics", help="one summary line per micro-batch of a run, from its metrics directory"
    )
    metrics.add_argument("directory", help="the query's option 'metrics' (a path or URI)")
    metrics.add_argument(
        "--json",
        action="store_true",
        help="the run so far as one JSON object (docs/guide/watching-a-run.md has its shape)",
    )
    metrics.add_argument(
        "--follow", action="store_true", help="refresh the progress bar until the run ends"
    )
    metrics.add_argument(
        "--interval", type=float, default=2.0, help="seconds between refreshes (--follow)"
    )

    report = commands.add_parser("report", help="a run as one self-contained HTML page")
    report.add_argument("directory", help="the query's option 'metrics' (a path or URI)")
    report.add_argument("-o", "--output", required=True, help="the HTML file to write")

    plan = commands.add_parser(
        "plan",
        help="without Spark: check a query's options and server, and print what it would send "
        "(prompts, requests after dedupe and cache, an upper bound of tokens and cost)",
    )
    plan.add_argument(
        "--option",
        "-O",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a reader option, as .option(KEY, VALUE); repeat for each",
    )
    plan.add_argument(
        "--options-file", help="a JSON object of reader options (the --option ones win)"
    )
    plan.add_argument("--json", action="store_true", help="the plan as one JSON object")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "simulate":
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_simulate(args))
        return 0
    if args.command == "schema":
        return _schema(args)
    if args.command in ("metrics", "report"):
        from dspark_json.errors import DSparkJsonError, mask_uris

        try:
            return _metrics(args) if args.command == "metrics" else _report_page(args)
        except DSparkJsonError as exc:  # a bad URI or storage setting: the message, no trace
            sys.stderr.write(f"dspark-json {args.command}: {exc}\n")
            return 2
        except OSError as exc:  # the directory not readable, or the page not writable
            sys.stderr.write(f"dspark-json {args.command}: {mask_uris(str(exc))}\n")
            return 2
    if args.command == "plan":
        return _plan(args)
    return _demo(args)


def _metrics(args: argparse.Namespace) -> int:
    """The lines the driver logs per micro-batch, one for the whole run, and the progress of
    the run (live while it runs: ``--follow`` refreshes it, ``--json`` prints it as JSON)."""
    import json

    from dspark_json.errors import mask_uris
    from dspark_json.fs import kind_of
    from dspark_json.metrics import by_batch, read_records, summary
    from dspark_json.progress import render, snapshot
    from dspark_json.storage import parse_settings

    directory, storage = args.directory, parse_settings(None)
    if (args.json or args.follow) and kind_of(directory, storage=storage) == "missing":
        sys.stderr.write(  # a typo would wait forever, silently
            f"dspark-json metrics: {mask_uris(directory)} does not exist (yet): waiting for a "
            "run to write there. Check that it is the query's option 'metrics'.\n"
        )
    if args.json:
        _say(json.dumps(snapshot(directory, storage=storage), sort_keys=True))
        return 0
    if args.follow:
        return _follow(directory, args.interval)
    records = read_records(directory, storage=storage)
    shot = snapshot(directory, storage=storage)
    if not records and shot["state"] == "waiting":
        sys.stderr.write(
            f"dspark-json metrics: no metrics records in {mask_uris(directory)} (the directory a "
            "query's option 'metrics' names)\n"
        )
        return 2
    groups = by_batch(records)
    for batch_id, group in groups.items():
        _say(summary(group, f"batch {batch_id}" if batch_id is not None else "generate()"))
    if len(groups) > 1:
        _say(summary(records, f"all {len(groups)} batches"))
    if shot["state"] != "waiting":
        _say(render(shot))
    return 0


def _follow(directory: str, interval: float) -> int:
    """``metrics --follow``: the progress bar redrawn in place until the run ends."""
    from dspark_json.progress import render, snapshot
    from dspark_json.storage import parse_settings

    storage = parse_settings(None)
    drawn = 0
    try:
        while True:
            text = render(snapshot(directory, storage=storage))
            if drawn:
                sys.stdout.write(f"\x1b[{drawn}A\x1b[J")  # up over the last drawing, cleared
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            drawn = text.count("\n") + 1
            if "finished" in text.split("\n", 1)[0]:
                return 0
            time.sleep(interval)
    except KeyboardInterrupt:
        return 130


def _report_page(args: argparse.Namespace) -> int:
    from dspark_json.errors import mask_uris
    from dspark_json.report import write_report
    from dspark_json.storage import parse_settings

    written = write_report(args.directory, args.output, storage=parse_settings(None))
    if not written:
        sys.stderr.write(
            f"dspark-json report: no metrics or progress records in {mask_uris(args.directory)}\n"
        )
        return 2
    _say(f"dspark-json report: {args.output}")
    return 0


def _plan(args: argparse.Namespace) -> int:
    import json

    from dspark_json.errors import DSparkJsonError
    from dspark_json.plan import describe_plan, plan_query

    raw: dict[str, str] = {}
    try:
        if args.options_file:
            given = json.loads(Path(args.options_file).read_text())
            if not isinstance(given, dict):
                raise ValueError("not a JSON object")
            raw.update(
                {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in given.items()}
            )
        for item in args.option:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--option {item!r} is not KEY=VALUE")
            raw[key.strip()] = value
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"dspark-json plan: {exc}\n")
        return 2
    try:
        found = plan_query(raw)
    except DSparkJsonError as exc:
        sys.stderr.write(f"dspark-json plan: {exc}\n")
        return 2
    _say(json.dumps(found, sort_keys=True) if args.json else describe_plan(found))
    return 0


def _schema(args: argparse.Namespace) -> int:
    from dspark_json.errors import DSparkJsonError, mask_uris
    from dspark_json.inputs.listing import PromptListing
    from dspark_json.inputs.prompts import infer_passthrough
    from dspark_json.load import describe, prepare, resolve_schema
    from dspark_json.options import Options

    given = {
        "endpoint": args.endpoint,
        "responseFormat": args.response_format,
        "schemaEndpoint": args.schema_endpoint,
        "prompts": args.prompts,
        "responses": args.responses,
        "inferSchemaSamples": args.samples,
        "schemaHints": args.schema_hints,
        "model": args.model,
        "apiKeyEnv": args.api_key_env,
    }
    raw = {k: v for k, v in given.items() if v is not None}
    try:
        if args.prompts is None and args.responses is None:
            raw.setdefault("endpoint", "http://127.0.0.1:8000")  # not contacted without samples
            raw["inferSchemaSamples"] = "0"
            options = Options.parse(raw, unused=("prompts",))
        else:
            options = Options.parse(raw)
        needs_server = options.schema.schema_endpoint is not None or (
            options.request.response_format is None and options.schema.infer_schema_samples > 0
        )
        query = prepare(options, contact_server=needs_server)
        passthrough = (
            infer_passthrough(
                PromptListing(args.prompts, storage=options.storage.settings, option="prompts")
            )
            if args.prompts
            else []
        )
        _say(describe(resolve_schema(query, passthrough)))
    except DSparkJsonError as exc:
        sys.stderr.write(f"dspark-json schema: {mask_uris(str(exc))}\n")
        return 2
    return 0


async def _simulate(args: argparse.Namespace) -> None:
    from dspark_json.dev.engine import Engine
    from dspark_json.dev.simulator import Faults, run

    rates = {}
    for item in args.fail:
        status, _, rate = item.partition("=")
        rates[int(status)] = float(rate)
    faults = Faults(
        error_rates=rates,
        error_shape=args.error_shape,
        retry_after=args.retry_after,
        retry_after_ms=args.retry_after_ms,
        slow_rate=args.slow_rate,
        slow_seconds=args.slow_seconds,
        reset_rate=args.reset_rate,
        truncate_rate=args.truncate_rate,
        malformed_rate=args.malformed_rate,
        capacity=args.capacity,
        scheduling_policy=args.scheduling_policy,
        api_key=os.environ.get(args.api_key_env) if args.api_key_env else None,
        vary=args.vary,
        drift_after=args.drift_after,
        served_schema=args.served_schema,
        gateway=args.gateway,
        objectives={
            name: int(rank) for name, _, rank in (o.rpartition("=") for o in args.objective)
        },
        shed_queue=args.shed_queue,
        no_backend=args.no_backend,
        rpm=args.rpm,
        rate_window=args.rate_window,
        first_truncated_rate=args.first_truncated_rate,
        first_broken_rate=args.first_broken_rate,
        first_prose_rate=args.first_prose_rate,
        first_invalid_rate=args.first_invalid_rate,
        tool_broken_rate=args.tool_broken_rate,
        tool_drift_rate=args.tool_drift_rate,
        tool_unknown_rate=args.tool_unknown_rate,
    )
    engine = Engine(
        cache_blocks=args.cache_blocks,
        block_size=args.block_size,
        prefill_ms=args.prefill_ms,
        decode_ms=args.decode_ms,
    )
    await run(
        args.host,
        args.port,
        model=args.model,
        seed=args.seed,
        latency=args.latency,
        faults=faults,
        engine=engine,
    )


def _say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _demo(args: argparse.Namespace) -> int:
    import dspark_json
    from dspark_json.dev.local import SimulatorProcess, local_spark
    from dspark_json.dev.samples import write_sample_prompts

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    prompts, table, checkpoint = work / "prompts", work / "table", work / "_checkpoint"
    schema_file = work / "review_schema.json"
    work.mkdir(parents=True)
    schema_file.write_text(
        resources.files("dspark_json").joinpath("examples/review_schema.json").read_text()
    )
    write_sample_prompts(prompts, args.rows)
    _say(f"dspark-json demo: {args.rows} prompts in {prompts}")

    with SimulatorProcess() as server:
        _say(f"simulator (vLLM-compatible) at {server.url}")
        spark = local_spark("dspark-json demo")
        try:
            dspark_json.register(spark)
            df = (
                spark.readStream.format(dspark_json.FORMAT)
                .option("endpoint", server.url)
                .option("prompts", str(prompts))
                .option("responseFormat", str(schema_file))
                .option("parseMode", args.parse_mode)
                .option("journal", str(work / "_journal"))
                .option("metrics", str(work / "metrics"))
                .load()
            )
            started = time.perf_counter()
            query = dspark_json.write_delta(
                df, str(table), checkpoint=str(checkpoint), trigger={"availableNow": True}
            )
            query.awaitTermination()
            elapsed = time.perf_counter() - started
        finally:
            spark.stop()
        requests = server.stats().get("chat_completions", 0)
    _report(table, elapsed, requests)
    _report_metrics(work / "metrics")
    return 0


def _report_metrics(directory: Path) -> None:
    """A summary of the per-partition metrics records (the full ones are JSON lines there)."""
    from dspark_json.metrics import read_records, summary
    from dspark_json.storage import ENVIRONMENT_ONLY

    records = read_records(str(directory), storage=ENVIRONMENT_ONLY)
    if records:
        _say(summary(records, f"metrics (records in {directory}; dspark-json metrics DIR)"))


def _report(table_path: Path, elapsed: float, requests: int) -> None:
    from deltalake import DeltaTable

    from dspark_json.delta.reader import read_table
    from dspark_json.rows import STATUS

    delta = DeltaTable(str(table_path))
    table = read_table(str(table_path), version=delta.version())
    rows = table.num_rows
    statuses = Counter(table.column(STATUS.name).to_pylist())
    _say(
        f"streamed {rows} rows into Delta table {table_path} (version {delta.version()}) "
        f"in {elapsed:.1f}s: {rows / elapsed:.0f} rows/s, {requests} requests to the server"
    )
    _say(f"row status: {dict(statuses)}")
    _say(
        "first rows (custom_id, product, parsed.sentiment, parsed.score, parsed.stars, "
        "parsed.topics, created):"
    )
    sample = table.sort_by("custom_id").slice(0, 5).to_pylist()
    for row in sample:
        parsed = row["parsed"] or {}
        _say(
            f"  {row['custom_id']}  {row['product']:<15} {parsed.get('sentiment')!s:<9} "
            f"{parsed.get('score')!s:<7} {parsed.get('stars')!s:<2} {parsed.get('topics')} "
            f"{row['created']:%Y-%m-%d %H:%M:%S}"
        )


if __name__ == "__main__":  # python -m dspark_json.cli, as the docs write it
    raise SystemExit(main())
