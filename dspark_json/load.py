"""What the driver does at ``.load()``, once per query: check the server, settle the model and
the JSON Schema answers follow (:func:`prepare`), then resolve the output schema
(:func:`resolve_schema`).

Schema resolution, in this order: a user schema (``.schema(...)``) always wins — Spark then never
asks for ours; the JSON Schema the model is asked to follow (``responseFormat``) types
``parsed``; else the one the server offers (``schemaEndpoint``); else ``parsed`` is inferred from
sample answers. The envelope is typed from vLLM's documented shape. ``schemaHints`` pin chosen
columns on top of any of these.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import DataType, StringType, StructField, StructType

from dspark_json.errors import BackendUnavailable, OptionError, SchemaError
from dspark_json.fs import check_writable, mask_uris
from dspark_json.http.preflight import (
    check_line_models,
    check_model,
    check_priority,
    fetch_served_schema,
)
from dspark_json.http.secrets import redact
from dspark_json.inputs.listing import PromptListing
from dspark_json.inputs.prompts import line_models
from dspark_json.options import OPTION_SPECS, Options, Query
from dspark_json.records import PromptRecord
from dspark_json.response.envelope import ENVELOPE_COLUMNS, TOOL_CALLS
from dspark_json.rows import OPTIONAL_COLUMNS, STATUS, SYSTEM_COLUMNS
from dspark_json.schema.ddl import apply_hints, to_ddl
from dspark_json.schema.inference import contents_of, infer_type
from dspark_json.schema.json_schema import json_schema_to_spark
from dspark_json.schema.output import RESPONSE_COLUMNS, output_schema, tool_arguments
from dspark_json.schema.tools import inferred_arguments, tool_choice_body, tool_parameters
from dspark_json.storage import missing_credentials

__all__ = [
    "Resolved",
    "added_columns",
    "check_backend",
    "check_output_directories",
    "check_user_schema",
    "describe",
    "prepare",
    "query_schema",
    "resolve_parsed",
    "resolve_schema",
    "resolve_tools",
]

logger = logging.getLogger("dspark_json")

#: The sample answers for inference, asked for (or read) on the first call.
Samples = Callable[[], list[str | None]]


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """The type of ``parsed`` (``None``: no such column) and where it came from."""

    parsed: DataType | None
    source: str


def prepare(options: Options, *, contact_server: bool = True) -> Query:
    """The driver's work at ``.load()`` before any schema.

    Parameters
    ----------
    options:
        The parsed options.
    contact_server:
        Check each endpoint's ``/v1/models`` and ``healthPath`` and settle the model (skipped when
        replaying recorded answers, which need no server).
    """
    check_backend(options)
    check_storage(options)
    check_output_directories(options)
    model, context = options.request.model, None
    if options.input.responses is None and contact_server:
        model, context = check_model(options.http, model)
        check_priority(options.http, model, options.request.priority)
        if options.input.prompts is not None:  # a line's model: one the endpoints serve?
            check_line_models(
                options.http, line_models(options.input.prompts, storage=options.storage.settings)
            )
    check_priced(options, model)
    json_schema = options.request.response_format
    where = options.schema.schema_endpoint
    if where is not None and json_schema is None:
        if not options.http.endpoints:
            raise OptionError(
                "Option 'schemaEndpoint' is a path on the server: give option 'endpoint' too, "
                "or a full URL."
            )
        json_schema = fetch_served_schema(options.http, where)
    tools = options.request.tools
    if options.request.tool_choice is not None:
        tool_choice_body(options.request.tool_choice, tools)  # a name must be one of the tools
    with_parameters = any(p is not None for p in tool_parameters(tools or ()).values())
    if options.schema.validate_schema and json_schema is None and not with_parameters:
        raise OptionError(
            "Option 'validateSchema' needs the JSON Schema to validate against: give option "
            "'responseFormat' or 'schemaEndpoint' (or 'tools' with parameters, for the calls' "
            "arguments)."
        )
    return Query(options=options, model=model, json_schema=json_schema, context=context)


def check_priced(options: Options, model: str | None) -> None:
    """A WARN where option ``pricing`` has no price for the query's model (nor ``"*"``): a
    name spelled differently from the server's leaves every cost unknown, silently."""
    pricing = options.rows.pricing
    if pricing is None or model is None or pricing.of(model) is not None:
        return
    logger.warning(
        "Option 'pricing' has no price for model %r (priced: %s) and no '*': this query's cost "
        "is not counted. Use the model's name as the server lists it (GET /v1/models), or "
        "add '*' for any model.",
        model,
        ", ".join(map(repr, sorted(pricing))),
    )


def check_backend(options: Options) -> None:
    """``parseMode=gpu`` where cuDF is not even installed: fail before any request (found in
    the tasks, after the answers, it would throw away answers already paid for).

    Only the installation is checked here: a driver without a GPU whose executors have one is
    a usual cluster. Each task checks its own GPU before it sends anything
    (:func:`dspark_json.pipeline.read_partition`)."""
    if options.rows.parse_mode != "gpu" or importlib.util.find_spec("cudf") is not None:
        return
    from dspark_json.parse import INSTALL_HINT

    raise BackendUnavailable(
        "parseMode=gpu, but cuDF is not installed where .load() runs, so no prompt was sent. "
        f"Install it on the driver and the executors ({INSTALL_HINT}), or use parseMode=cpu "
        "(parseMode=auto parses on the CPU too, as long as the GPU parser is unverified)."
    )


def check_storage(options: Options) -> None:
    """Fail at once where a path option's object store lacks a setting it needs (a key without
    its secret, no credentials where the store would otherwise wait on a metadata server),
    naming the option, the store and what to set."""
    settings = options.storage.settings
    for name, where in (
        ("prompts", options.input.prompts),
        ("responses", options.input.responses),
        ("journal", options.input.journal),
        ("metrics", options.rows.metrics),
        ("cache", options.reuse.cache),
        ("endpointsFile", options.http.endpoints_file),
    ):
        if where is None:
            continue
        missing = missing_credentials(where, settings)
        if missing:
            raise OptionError(f"Option {name!r} names {mask_uris(where)}: {missing}.")


def check_output_directories(options: Options) -> None:
    """Fail before any request where the journal, the metrics or the cache directory cannot be
    written (each is created where missing): found only after the answers are in, such a
    failure would throw away answers already paid for."""
    for name, directory in (
        ("journal", options.input.journal),
        ("metrics", options.rows.metrics),
        ("cache", options.reuse.cache),
    ):
        if directory is None:
            continue
        problem = None
        try:
            check_writable(directory, storage=options.storage.settings)
        except (OSError, ValueError, pa.ArrowException) as exc:  # ArrowInvalid: the URI
            problem = redact(f"Option {name!r} names {directory}, which cannot be written ({exc}).")
        if problem is not None:  # raised here: the unmasked error is not its __context__
            raise OptionError(
                problem + " Point it at a directory this query may create and write (on a "
                "cluster: from the driver and from every executor)."
            )


def resolve_schema(query: Query, passthrough: list[StructField]) -> StructType:
    """The query's output schema (``schemaHints`` applied).

    Parameters
    ----------
    query:
        What :func:`prepare` settled.
    passthrough:
        The prompt fields passed through as columns (typed from a sample of the input).
    """
    samples = functools.cache(lambda: _sample_bodies(query))  # sent once for both
    resolved = resolve_parsed(query, samples)
    logger.info("Schema of `parsed`: %s.", resolved.source)
    return query_schema(
        query, passthrough=passthrough, parsed=resolved.parsed, tools=resolve_tools(query, samples)
    )


def check_user_schema(
    query: Query, schema: StructType, prompt_columns: Callable[[], list[str] | None]
) -> None:
    """Fail at ``.load()`` where a user's ``.schema(...)`` would lose answers in silence: it
    names columns the source never fills, or has none of the columns the answers land in
    (``parsed``, the envelope, ``_rescued_data``...). The message names them and what to write
    instead (``parsed STRUCT<sentiment: STRING>``).

    Parameters
    ----------
    query:
        What :func:`prepare` settled.
    schema:
        The user's schema.
    prompt_columns:
        The columns the prompt lines' fields are passed through as, from a sample (called only
        where the schema names a column of no other kind); ``None``: no prompt line to sample
        yet, so a column of no other kind may be a prompt field still to come.
    """
    options = query.options
    added = added_columns(options)
    filled = {"custom_id", *ENVELOPE_COLUMNS, "parsed", *SYSTEM_COLUMNS, *added}
    if options.request.tools is not None:
        filled.add(TOOL_CALLS)
    lands = (filled & RESPONSE_COLUMNS) - {STATUS.name}  # _status holds no part of the answer
    unknown = [f for f in schema.fields if f.name not in filled]
    seen: list[str] | None = []
    if unknown:
        seen = prompt_columns()
        if seen is not None:
            unknown = [f for f in unknown if f.name not in seen]
        elif lands & set(schema.names):  # prompt fields still to come may fill them
            unknown = []
    lost = not lands & set(schema.names)
    if unknown or lost:
        raise SchemaError(
            _unfilled_message(query, schema, unknown, lost=lost, filled=filled | set(seen or ()))
        )


def _unfilled_message(
    query: Query, schema: StructType, unknown: list[StructField], *, lost: bool, filled: set[str]
) -> str:
    """What :func:`check_user_schema` says: the columns, why each is never filled, the fix."""
    optional = {c.name: c.option for c in OPTIONAL_COLUMNS}
    spelled = {name.lower(): name for name in filled}
    known = query_schema(query)  # parsed typed from the JSON Schema, where there is one
    fields = known["parsed"].dataType if "parsed" in known.names else None
    in_json = set(fields.names) if isinstance(fields, StructType) else None
    reasons, answer_fields = [], []
    for f in unknown:
        if f.name in optional:
            reasons.append(f"{f.name} (filled only with option {optional[f.name]})")
        elif f.name.lower() in spelled:
            reasons.append(f"{f.name} (did you mean {spelled[f.name.lower()]}?)")
        elif in_json is not None and f.name not in in_json:
            reasons.append(
                f"{f.name} (neither an output column, a prompt field nor a field of "
                "the JSON Schema)"
            )
        else:
            reasons.append(
                f"{f.name} (a field of the answers' JSON is in column parsed: parsed.{f.name})"
            )
            answer_fields.append(f)
    parts = ["The schema given with .schema(...)"]
    if unknown:
        parts.append(
            " names column(s) dspark-json never fills, so they would be null in every row: "
            + ", ".join(reasons)
            + "."
        )
    if lost:
        parts.append(
            (" It" if unknown else "")
            + " has no column the answers land in (parsed, choices, _rescued_data, "
            "_corrupt_record...): every answer would be paid for and lost."
        )
    if answer_fields or lost:
        given = [f.dataType for f in schema.fields if f.name.lower() == "parsed"]
        inner = list(given[0].fields) if given and isinstance(given[0], StructType) else []
        inner += [StructField(f.name, f.dataType) for f in answer_fields]
        if not inner and isinstance(fields, StructType):
            inner = list(fields.fields)
        kept = [f for f in schema.fields if f.name in filled and f.name != "parsed"]
        system = [f.name for f in kept]
        suggested = StructType(
            [f for f in kept if f.name not in SYSTEM_COLUMNS]
            + ([StructField("parsed", StructType(inner))] if inner else [])
            + [f for f in kept if f.name in SYSTEM_COLUMNS]
            + [
                StructField(name, StringType())
                for name in (STATUS.name, "_rescued_data")
                if name not in system
            ]
        )
        selects = ", ".join(f"parsed.{f.name}" for f in answer_fields)
        parts.append(
            f' Write .schema("{to_ddl(suggested)}")'
            + (f" and select {selects}" if selects else "")
            + "."
        )
    parts.append(
        " Or leave .schema(...) out: `dspark-json schema` with the same options prints the "
        "schema the answers get, as DDL to start from."
    )
    return "".join(parts)


def added_columns(options: Options) -> tuple[str, ...]:
    """The optional system columns these options add (each registry entry names its option:
    :data:`dspark_json.rows.OPTIONAL_COLUMNS`), in the registry's order."""
    specs = {spec.name: spec for spec in OPTION_SPECS}

    def value(name: str) -> Any:
        spec = specs[name]
        return getattr(getattr(options, spec.stage), spec.attr)

    return tuple(c.name for c in OPTIONAL_COLUMNS if c.option and value(c.option))


def query_schema(
    query: Query,
    *,
    passthrough: list[StructField] | None = None,
    parsed: DataType | None = None,
    tools: dict[str, DataType] | None = None,
) -> StructType:
    """The query's output schema, for the source and ``generate`` alike: the columns of
    :func:`dspark_json.schema.output.output_schema` and the optional system columns the query's
    options add (:func:`added_columns`), option ``schemaHints`` applied last. ``parsed``
    ``None``: typed from the JSON Schema the answers follow, if any."""
    schema = output_schema(
        passthrough=passthrough or (),
        response_format=query.json_schema if parsed is None else None,
        parsed=parsed,
        tools=tools,
        added=added_columns(query.options),
    )
    hints = query.options.schema.schema_hints
    return apply_hints(schema, list(hints)) if hints else schema


def resolve_parsed(query: Query, samples: Samples | None = None) -> Resolved:
    """The type of ``parsed`` and where it came from (see the module doc for the order);
    ``samples`` gives the sample answers (default: asked or read now)."""
    options = query.options
    if query.json_schema is not None:
        source = (
            "option responseFormat"
            if options.request.response_format is not None
            else f"served at schemaEndpoint {options.schema.schema_endpoint}"
        )
        return Resolved(parsed=json_schema_to_spark(query.json_schema), source=source)
    if options.schema.infer_schema_samples == 0:
        return Resolved(parsed=None, source="none (inferSchemaSamples=0): no `parsed` column")
    bodies = samples() if samples is not None else _sample_bodies(query)
    values = contents_of(bodies)
    if not values:
        return Resolved(
            parsed=None,
            source=f"none: no JSON in the content of {len(bodies)} sample answer(s); give "
            "responseFormat or a schema to type it",
        )
    return Resolved(
        parsed=infer_type(values), source=f"inferred from {len(values)} sample answer(s)"
    )


def resolve_tools(query: Query, samples: Samples | None = None) -> dict[str, DataType] | None:
    """Function name -> the type of its calls' arguments (option ``tools``; None without it):
    from its ``parameters``, else inferred from sample answers (``inferSchemaSamples``; string,
    the arguments' JSON text, where none is sampled or inference is off)."""
    tools = query.options.request.tools
    if tools is None:
        return None
    missing = [name for name, p in tool_parameters(tools).items() if p is None]
    inferred: dict[str, DataType] = {}
    if missing and query.options.schema.infer_schema_samples > 0:
        bodies = samples() if samples is not None else _sample_bodies(query)
        inferred = {name: inferred_arguments(bodies, name) for name in missing}
        logger.info(
            "Arguments of tool(s) %s inferred from %d sample answer(s).", missing, len(bodies)
        )
    return tool_arguments(tools, inferred)


def _sample_bodies(query: Query) -> list[str | None]:
    """The first ``inferSchemaSamples`` answers: recorded ones, or asked now."""
    # Here, not at the top: the parser (numba) and the pipeline only where answers are sampled.
    from dspark_json.inputs.prompts import read_segment
    from dspark_json.inputs.recorded import read_recorded
    from dspark_json.pipeline import fetch

    options = query.options
    n = options.schema.infer_schema_samples
    option = "responses" if options.input.responses is not None else "prompts"
    listing = PromptListing(options.input.location, storage=options.storage.settings, option=option)
    # Lazily: only the files and rows sampled are counted and read, not the whole input.
    if options.input.responses is not None:
        bodies: list[str | None] = []
        for segment in listing.sample(max(n, 1)):
            if len(bodies) >= n:
                break
            _, outcomes = read_recorded([segment], max_bytes=options.http.max_response_bytes)
            bodies.extend(outcomes.bodies[: n - len(bodies)].to_pylist())
        return bodies
    records: list[PromptRecord] = []
    for segment in listing.sample(max(n, 1)):
        if len(records) >= n:
            break
        records += [r for r in read_segment(segment) if r.problem is None][: n - len(records)]
    if not records:
        return []
    logger.info(
        "Inferring the schema of `parsed` from the answers to the first %d prompt(s), sent now "
        "(set inferSchemaSamples=0 or give responseFormat to send none).",
        len(records),
    )
    return [o.body for o in fetch(records, query).outcomes]


def describe(schema: StructType) -> str:
    """The schema as a tree and as DDL, for ``dspark-json schema``."""
    return f"{schema.treeString()}\nDDL (for .schema(...)):\n{to_ddl(schema)}\n"
