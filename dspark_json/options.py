"""The reader's options, grouped by the stage that reads them, and the query the driver settles.

Spark hands a data source its options as a case-insensitive dict of strings. :meth:`Options.parse`
checks them once, on the driver, into frozen per-stage options that travel to the executors, so
a bad value fails at ``.load()`` with a message that names the option, the value and what is
allowed. Each option is declared once, next to the stage that reads it (name, spellings,
default, converter, meaning): :mod:`dspark_json.http.options`, :mod:`dspark_json.inputs.options`,
:mod:`dspark_json.schema.options` and :class:`RowOptions` below. :data:`OPTION_SPECS` gathers
them; :func:`options_table` renders the docs' options reference from it.
"""

from __future__ import annotations

import difflib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dspark_json.cost import Pricing, parse_pricing
from dspark_json.errors import OptionError
from dspark_json.http.options import HttpOptions, RequestOptions
from dspark_json.http.reuse import ReuseOptions
from dspark_json.inputs.options import InputOptions
from dspark_json.option_spec import (
    OptionSpec,
    boolean,
    choice,
    directory,
    number,
    option,
    specs_of,
)
from dspark_json.reask.options import RepairOptions
from dspark_json.rows import PARSE_MODES, RECORD_MODES, ParseMode, RecordMode
from dspark_json.schema.options import SchemaOptions
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings, parse_settings, parsing

__all__ = [
    "FORMAT",
    "OPTION_SPECS",
    "STAGES",
    "Options",
    "Query",
    "RowOptions",
    "StorageOptions",
    "options_table",
]

#: The name of the format these are the options of: ``spark.read.format(FORMAT)``.
FORMAT = "dspark-json"

logger = logging.getLogger("dspark_json")


@dataclass(frozen=True)
class _Needs:
    """Option ``option`` (where ``when`` holds for its text) does nothing, or goes wrong,
    unless ``met`` holds for the parsed options (option ``needs`` given as it must be):
    an :class:`OptionError` where ``error``, else a WARN, each saying ``why``."""

    option: str
    needs: str
    why: str
    met: Callable[[Options], bool]
    error: bool = False
    when: Callable[[str], bool] = lambda text: True


#: The options that need another, in one place (read by :meth:`Options.parse`). Errors where
#: the combination cannot work (every request would be refused); WARNs where the option is only
#: ignored, so a query that merely carries it still runs.
_NEEDS: tuple[_Needs, ...] = (
    _Needs(
        "toolChoice",
        "tools",
        "vLLM refuses tool_choice=required without tools (HTTP 400), so every request would "
        "fail. Give option 'tools', or leave 'toolChoice' out",
        met=lambda o: o.request.tools is not None,
        error=True,
        when=lambda text: text.strip().lower() == "required",
    ),
    _Needs(
        "cacheMode",
        "cache",
        "it says which answers the response cache keeps, and there is no cache. Give option "
        "'cache' (a directory), or leave 'cacheMode' out",
        met=lambda o: o.reuse.cache is not None,
    ),
    _Needs(
        "prometheusPort",
        "metrics",
        "the figures it serves are the progress records the tasks write under option "
        "'metrics'. Give option 'metrics' (a directory), or leave 'prometheusPort' out",
        met=lambda o: o.rows.metrics is not None,
        error=True,
    ),
    _Needs(
        "repairTokenBudget",
        "repairAttempts",
        "it bounds the tokens re-asks spend, and nothing is re-asked while 'repairAttempts' is 0 "
        "(its default). Set 'repairAttempts' (e.g. 2), or leave 'repairTokenBudget' out",
        met=lambda o: o.repair.repair_attempts > 0,
    ),
    _Needs(
        "repairMaxTokens",
        "repairAttempts",
        "it caps the max_tokens of re-asks, and nothing is re-asked while 'repairAttempts' is 0 "
        "(its default). Set 'repairAttempts' (e.g. 2), or leave 'repairMaxTokens' out",
        met=lambda o: o.repair.repair_attempts > 0,
    ),
)
#: The WARNs already given in this process, by rule and options (Spark builds and parses the
#: options of one query several times: it is warned about once).
_WARNED: set[tuple[str, str, frozenset[tuple[str, tuple[str, str]]]]] = set()


def _check_needs(options: Options, given: Mapping[str, tuple[str, str]]) -> None:
    for rule in _NEEDS:
        if rule.option not in given or not rule.when(given[rule.option][1]):
            continue
        if rule.met(options):
            continue
        spelling, text = given[rule.option]
        message = f"Option {spelling!r} ({text!r}) needs option {rule.needs!r}: {rule.why}."
        if rule.error:
            raise OptionError(message)
        seen = (rule.option, rule.needs, frozenset(given.items()))
        if seen not in _WARNED:
            _WARNED.add(seen)
            logger.warning("%s", message)


def _fraction(name: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise OptionError(
            f"Option {name!r} must be a share of the GPU's memory above 0 and at most 1 "
            f"(e.g. 0.2 for a fifth), got {text!r}."
        )
    return value


@dataclass(frozen=True, kw_only=True)
class RowOptions:
    """How rows are parsed, what happens to malformed ones, and where each partition reports."""

    parse_mode: ParseMode = option(
        "parseMode",
        "Parser backend: auto (GPU when cuDF and a device are there, else CPU, logged), cpu, "
        "or gpu (fails loudly without one). 'gpu-accelerated' means gpu.",
        "cpu",
        convert=choice(PARSE_MODES),
        default="auto",
        aliases=("dspark.json.parse_mode",),
        keyword="backend",  # as parse_responses and parse_dataframe call it
    )
    gpu_memory_fraction: float = option(
        "gpuMemoryFraction",
        "GPU parser: the share of the device's memory RMM may pool for parsing (above 0, at "
        "most 1), so the parser can share a GPU with vLLM.",
        "0.2",
        convert=_fraction,
        default="0.1",
    )
    allow_unquoted_control_chars: bool = option(
        "allowUnquotedControlChars",
        "Accept raw control characters (tabs, newlines, U+0000-U+001F) inside JSON strings in a "
        "message's content, as Spark's JSON reader option of that name and json.loads("
        "strict=False) do: models and guided decoding write them. false: such content is "
        "corrupt_content. The envelope is always strict.",
        "false",
        convert=boolean,
        default="true",
    )
    mode: RecordMode = option(
        "mode",
        "What to do with a malformed row (a bad prompt line, an answer that does not parse or "
        "fit), as in Spark's JSON source: PERMISSIVE keeps it (raw text in _corrupt_record), "
        "DROPMALFORMED drops it (http_error and empty rows are kept), FAILFAST fails the query "
        "(at an http_error row too).",
        "FAILFAST",
        convert=choice({m: m for m in RECORD_MODES}, upper=True),
        default="PERMISSIVE",
    )
    metrics: str | None = option(
        "metrics",
        "Directory where each partition writes one JSON record of what it did (requests, "
        "retries, status codes, latency p50/p95/p99, in-flight limit, tokens, parse backend "
        "and time, row statuses, rescued and error rows, new fields). Read it as a table: "
        "spark.read.json(dir).",
        "/data/_metrics/answers",
        convert=directory,
    )
    pricing: Pricing | None = option(
        "pricing",
        "USD per million tokens by model, a JSON object: each model's 'input', 'output' and "
        "'cached_input' (the prompt tokens the server's prefix cache held; 'input' where left "
        "out), '*' for any other model. Adds cost_usd to the metrics records, the batch lines, "
        "the progress, the report and dspark-json plan. Guide: docs/guide/watching-a-run.md.",
        '{"my-model": {"input": 0.2, "output": 0.6, "cached_input": 0.05}}',
        convert=parse_pricing,
    )
    prometheus_port: int | None = option(
        "prometheusPort",
        "Serve the run's figures to Prometheus on this port of the driver (text exposition "
        "format at /metrics: dspark_json_prompts_total, dspark_json_tokens_total{kind}, "
        "dspark_json_cost_usd_total...), read from option 'metrics''s progress records; 0 "
        "picks a free port (logged). Guide: docs/guide/watching-a-run.md.",
        "9464",
        convert=number(int, low=0, high=65535),
    )


def _storage_settings(name: str, text: str) -> StorageSettings:
    return parse_settings(text, name=name)


@dataclass(frozen=True, kw_only=True)
class StorageOptions:
    """How every path option (prompts, responses, journal, metrics, cache, endpointsFile) is
    reached on an object store: one set of settings, read on the driver."""

    settings: StorageSettings = option(
        "storageOptions",
        "Object stores (s3://, s3a://, gs://, gcs://, abfss://, abfs://, az://, azure://): a JSON "
        "object of settings, keys as delta-rs spells them (aws_access_key_id, "
        "aws_secret_access_key, aws_region, aws_endpoint_url, google_service_account, "
        "azure_storage_account_name, azure_storage_account_key, azure_storage_sas_token...), laid "
        "over the stores' environment variables (AWS_*, GOOGLE_*, AZURE_STORAGE_*) as the driver "
        "has them, and used for every path of the query, on the executors too. Values never "
        "appear in logs, errors or plans (docs/guide/object-stores.md).",
        '{"aws_endpoint_url": "http://127.0.0.1:9000", "aws_region": "us-east-1"}',
        convert=_storage_settings,
        empty=ENVIRONMENT_ONLY,
    )


#: The stages, in the order of the options table, and the options each reads.
STAGES: Mapping[str, type] = {
    "http": HttpOptions,
    "request": RequestOptions,
    "input": InputOptions,
    "schema": SchemaOptions,
    "rows": RowOptions,
    "repair": RepairOptions,
    "reuse": ReuseOptions,
    "storage": StorageOptions,
}
#: Every reader option.
OPTION_SPECS: tuple[OptionSpec, ...] = tuple(
    spec for stage, cls in STAGES.items() for spec in specs_of(stage, cls)
)
#: Lower-cased spelling -> (its option, the documented spelling).
_BY_SPELLING: dict[str, tuple[OptionSpec, str]] = {
    spelling.lower(): (spec, spelling)
    for spec in OPTION_SPECS
    for spelling in (spec.name, *spec.aliases)
}


@dataclass(frozen=True, kw_only=True)
class Options:
    """The reader's options, parsed and checked, per stage. Build it with :meth:`Options.parse`."""

    http: HttpOptions = field(default_factory=HttpOptions)
    request: RequestOptions = field(default_factory=RequestOptions)
    input: InputOptions = field(default_factory=InputOptions)
    schema: SchemaOptions = field(default_factory=SchemaOptions)
    rows: RowOptions = field(default_factory=RowOptions)
    repair: RepairOptions = field(default_factory=RepairOptions)
    reuse: ReuseOptions = field(default_factory=ReuseOptions)
    storage: StorageOptions = field(default_factory=StorageOptions)

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, unused: tuple[str, ...] = ()) -> Options:
        """Parse Spark's option dict; raise :class:`OptionError` on the first problem found.

        Parameters
        ----------
        raw:
            Option name (any documented spelling, any case) -> text.
        unused:
            Options that do not apply to the caller (e.g. ``prompts`` for
            :func:`dspark_json.generate`): they are neither required nor accepted.
        """
        given: dict[str, tuple[str, str]] = {}  # option name -> (spelling used, value)
        for key, value in raw.items():
            # Spark lower-cases option names; messages use the documented spelling.
            spec, spelling = _BY_SPELLING.get(key.lower(), (None, key))
            if spec is None:
                raise OptionError(_unknown_option_message(key))
            if spec.name in unused:
                raise OptionError(f"Option {spelling!r} does not apply here; leave it out.")
            if spec.name in given and given[spec.name][1] != value:
                raise OptionError(
                    f"Options {given[spec.name][0]!r} and {spelling!r} are two spellings of "
                    f"{spec.name!r} with different values; set only one."
                )
            given[spec.name] = (spelling, value)
        if "responses" in given and "prompts" in given:
            raise OptionError(
                f"Options {given['prompts'][0]!r} and 'responses' are both set: read prompts "
                "(and call the model) or replay recorded responses, not both."
            )
        if "responses" in given and "cache" in given:
            raise OptionError(
                f"Options {given['cache'][0]!r} and 'responses' are both set: the cache saves "
                "requests, and recorded responses send none. Leave 'cache' out."
            )
        if "apiKey" in given and "apiKeyEnv" in given:
            raise OptionError(
                f"Options {given['apiKey'][0]!r} and 'apiKeyEnv' both give the API key; set "
                "only one (apiKeyEnv keeps the key out of the query's options)."
            )
        values: dict[str, dict[str, Any]] = {stage: {} for stage in STAGES}
        # First the storage settings: an option naming a file (tools, responseFormat) is read
        # with them; where not given, the stores' environment variables as the driver has them.
        storage_spec = next(spec for spec in OPTION_SPECS if spec.stage == "storage")
        used, text = given.get(storage_spec.name, (storage_spec.name, ""))
        settings = parse_settings(text, name=used)
        values["storage"]["settings"] = settings
        with parsing(settings):
            for spec in OPTION_SPECS:
                if spec.stage != "storage":
                    cls._convert(spec, given, unused, values)
        values["http"]["storage"] = settings
        options = cls(**{stage: STAGES[stage](**values[stage]) for stage in STAGES})
        _check_needs(options, given)
        return options

    @staticmethod
    def _convert(
        spec: OptionSpec,
        given: Mapping[str, tuple[str, str]],
        unused: tuple[str, ...],
        values: dict[str, dict[str, Any]],
    ) -> None:
        """Option ``spec``'s value into ``values`` where given; an error where it is required
        and missing."""
        if spec.name in given:
            used, text = given[spec.name]
            values[spec.stage][spec.attr] = spec.convert(used, text)
        elif (
            spec.required
            and spec.name not in unused
            and "responses" not in given
            # option endpointsFile alone names the pool's endpoints (none, while scaled to zero)
            and not (spec.name == "endpoint" and "endpointsFile" in given)
        ):
            raise OptionError(
                f"Option {spec.name!r} is required: {spec.doc} "
                f"Example: .option({spec.name!r}, {spec.example!r})."
            )


@dataclass(frozen=True, kw_only=True)
class Query:
    """One query as the driver settled it at ``.load()``: what the executors receive.

    ``model`` is the model to ask (option ``model``, else the first one the server lists);
    ``json_schema`` is the JSON Schema the answers follow (option ``responseFormat``, else the
    one served at ``schemaEndpoint``; ``None`` when neither); ``context`` is the model's context
    length in tokens, where the server lists it (vLLM's ``max_model_len``); ``id`` tells this
    query from others in a process that serves several (a warning logged once per query).
    """

    options: Options
    model: str | None = None
    json_schema: Mapping[str, Any] | None = field(default=None, compare=False)
    context: int | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex, compare=False)


def _unknown_option_message(key: str) -> str:
    names = [spec.name for spec in OPTION_SPECS]
    close = difflib.get_close_matches(key.lower(), list(_BY_SPELLING), n=1, cutoff=0.6)
    hint = f" Did you mean {_BY_SPELLING[close[0]][1]!r}?" if close else ""
    return (
        f"Unknown option {key!r} for format 'dspark-json'.{hint} Known options: {', '.join(names)}."
    )


def options_table() -> str:
    """The reference table of every option, in Markdown, by stage (docs/reference/options.md)."""
    lines = [
        "| stage | option | also accepted | default | meaning | example |",
        "|---|---|---|---|---|---|",
    ]
    for spec in OPTION_SPECS:
        aliases = ", ".join(f"`{a}`" for a in spec.aliases) or ""
        default = "required" if spec.required else (f"`{spec.default}`" if spec.default else "")
        lines.append(
            f"| {spec.stage} | `{spec.name}` | {aliases} | {default} | {spec.doc} | "
            f"`{spec.example}` |"
        )
    return "\n".join(lines)
