"""Typed, validated reader options.

Spark hands a data source its options as a case-insensitive dict of strings. They are parsed once,
on the driver, into a frozen :class:`Options` that travels to the executors with the reader, so a
bad value fails at ``.load()`` with a message that names the option, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pyspark.sql.types import DataType

from dspark_json.ddl import parse_hints
from dspark_json.endpoints import Endpoint
from dspark_json.errors import OptionError
from dspark_json.fs import is_remote_uri, read_text
from dspark_json.secrets import ApiKey, Secret, redact, split_credentials

__all__ = ["OPTION_SPECS", "OptionSpec", "Options", "options_table"]

ParseMode = Literal["auto", "cpu", "gpu"]
RecordMode = Literal["PERMISSIVE", "DROPMALFORMED", "FAILFAST"]
EvolutionMode = Literal["rescue", "failOnNewColumns"]


@dataclass(frozen=True)
class OptionSpec:
    """One reader option: its name, the other spellings accepted, its default and meaning."""

    name: str
    attr: str
    doc: str
    example: str
    default: str | None = None
    aliases: tuple[str, ...] = ()
    required: bool = False


OPTION_SPECS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "endpoint",
        "endpoints",
        "Base URL of the vLLM / OpenAI-compatible server (a trailing /v1 is accepted). Several, "
        "comma-separated, share the load; one that keeps failing rests until its /health "
        "answers again. Credentials in the URL (user:pass@) are sent as Basic auth and never "
        "shown.",
        "http://vllm-a:8000,http://vllm-b:8000",
        aliases=("vllm_endpoint",),
        required=True,  # unless option responses replays recorded answers
    ),
    OptionSpec(
        "apiKey",
        "api_key",
        "API key sent as 'Authorization: Bearer <key>'. Never shown in logs, errors, explain() "
        "or progress (call dspark_json.register(spark) so Spark redacts it from plans). "
        "Prefer apiKeyEnv.",
        "sk-...",
        aliases=("api_key", "vllm_api_key"),
    ),
    OptionSpec(
        "apiKeyEnv",
        "api_key_env",
        "Name of an environment variable that holds the API key, read where requests are sent "
        "(the executors) and, for the checks at .load(), on the driver.",
        "VLLM_API_KEY",
    ),
    OptionSpec(
        "prompts",
        "prompts",
        "Directory (path or URI) of JSONL prompt files. Streaming reads pick up new files in "
        "name order; names starting with '.' or '_' are ignored.",
        "/data/prompts",
        aliases=("path",),
        required=True,
    ),
    OptionSpec(
        "responses",
        "responses",
        "Instead of prompts: a directory of recorded answers to parse, no HTTP. JSONL of raw "
        "response bodies, or the output of vLLM's / OpenAI's batch runner (custom_id, "
        "response.status_code, response.body, error). Same offsets and file rules as prompts.",
        "/data/batch-output",
    ),
    OptionSpec(
        "journal",
        "journal",
        "Directory where each partition's raw answers are written before its rows go to Spark; "
        "a replayed batch or a retried task reads them instead of calling the model again. "
        "Entries the sink has committed are pruned.",
        "/data/_journal/answers",
    ),
    OptionSpec(
        "model",
        "model",
        "Model name sent with each request. Default: the first model the server lists at "
        "/v1/models.",
        "Qwen/Qwen3-8B",
    ),
    OptionSpec(
        "responseFormat",
        "response_format",
        "JSON Schema the model must follow (a path, or the JSON text itself; a full OpenAI "
        "response_format object is accepted too). Sent as response_format and used to type "
        "the `parsed` column.",
        "/data/schema.json",
    ),
    OptionSpec(
        "metrics",
        "metrics",
        "Directory where each partition writes one JSON record of what it did (requests, "
        "retries, status codes, latency p50/p95/p99, in-flight limit, tokens, parse backend "
        "and time, row statuses, rescued and error rows, new fields). Read it as a table: "
        "spark.read.json(dir).",
        "/data/_metrics/answers",
    ),
    OptionSpec(
        "schemaEndpoint",
        "schema_endpoint",
        "Where the server offers the JSON Schema its answers follow (a path on the endpoint, "
        "e.g. GPUStack's /health/json-schema, or a URL); types `parsed` when responseFormat "
        "is not given.",
        "/health/json-schema",
    ),
    OptionSpec(
        "inferSchemaSamples",
        "infer_schema_samples",
        "With no schema, responseFormat or schemaEndpoint: how many prompts (the first ones) to "
        "send at .load() to infer `parsed` from their answers (recorded answers with option "
        "responses: nothing is sent). 0: no `parsed` column.",
        "20",
        default="8",
    ),
    OptionSpec(
        "schemaHints",
        "schema_hints",
        "Column types to pin on top of the resolved schema, as DDL: paths into structs, added "
        "if missing (as in Auto Loader).",
        "parsed.score DOUBLE, parsed.tags ARRAY<STRING>",
    ),
    OptionSpec(
        "schemaEvolutionMode",
        "schema_evolution_mode",
        "What a field the schema does not know does: rescue (kept in _rescued_data, the "
        "default) or failOnNewColumns (the query stops, naming the new fields).",
        "failOnNewColumns",
        default="rescue",
    ),
    OptionSpec(
        "validateSchema",
        "validate_schema",
        "Validate each answer's JSON against the JSON Schema (responseFormat or "
        "schemaEndpoint) with jsonschema; violations land in column _schema_violations, the "
        "rows are kept.",
        "true",
        default="false",
    ),
    OptionSpec(
        "parseMode",
        "parse_mode",
        "Parser backend: auto (GPU when cuDF and a device are there, else CPU, logged), cpu, "
        "or gpu (fails loudly without one). 'gpu-accelerated' means gpu.",
        "cpu",
        default="auto",
        aliases=("dspark.json.parse_mode",),
    ),
    OptionSpec(
        "gpuMemoryFraction",
        "gpu_memory_fraction",
        "GPU parser: the share of the device's memory RMM may pool for parsing (0-1), so the "
        "parser can share a GPU with vLLM.",
        "0.2",
        default="0.1",
    ),
    OptionSpec(
        "mode",
        "mode",
        "What to do with a row that cannot be fetched or parsed, as in Spark's JSON source: "
        "PERMISSIVE keeps it (raw text in _corrupt_record), DROPMALFORMED drops it, FAILFAST "
        "fails the query.",
        "FAILFAST",
        default="PERMISSIVE",
    ),
    OptionSpec(
        "systemPrompt",
        "system_prompt",
        "System message put before each prompt's messages (not where a prompt has its own).",
        "Answer in JSON.",
        aliases=("system_prompt",),
    ),
    OptionSpec(
        "maxTokens", "max_tokens", "max_tokens of each request.", "512", aliases=("max_tokens",)
    ),
    OptionSpec("temperature", "temperature", "Sampling temperature of each request.", "0"),
    OptionSpec(
        "topP", "top_p", "top_p of each request (above 0, at most 1).", "0.9", aliases=("top_p",)
    ),
    OptionSpec("seed", "seed", "Sampling seed of each request.", "42"),
    OptionSpec(
        "n",
        "n",
        "Choices per prompt (the `choices` array holds them; `parsed` is the first).",
        "2",
    ),
    OptionSpec(
        "extraBody",
        "extra_body",
        "JSON object merged into every request body, for server-specific fields "
        "(vLLM's guided_decoding_backend, repetition_penalty, chat_template_kwargs...).",
        '{"repetition_penalty": 1.05}',
        aliases=("extra_body",),
    ),
    OptionSpec(
        "maxConcurrency",
        "max_concurrency",
        "Most requests in flight per Spark task. The load on the server is up to this times "
        "the number of tasks running at once.",
        "64",
        default="32",
    ),
    OptionSpec(
        "initialConcurrency",
        "initial_concurrency",
        "Requests in flight per task at the start; the limit then adapts between 1 and "
        "maxConcurrency (up while latency holds, down on timeouts, 429, 5xx and growing "
        "latency, as vLLM queues instead of refusing).",
        "4",
        default="8",
    ),
    OptionSpec(
        "adaptiveConcurrency",
        "adaptive_concurrency",
        "Adapt the in-flight limit (true) or keep maxConcurrency requests in flight (false).",
        "false",
        default="true",
    ),
    OptionSpec(
        "connectTimeout",
        "connect_timeout",
        "Seconds to open a connection to the server.",
        "5",
        default="10",
    ),
    OptionSpec(
        "readTimeout",
        "read_timeout",
        "Seconds the server may stay silent while answering (vLLM sends a non-streamed answer "
        "at the end, so this is at least the generation time). Default: requestTimeout.",
        "120",
    ),
    OptionSpec(
        "requestTimeout",
        "request_timeout",
        "Seconds one attempt may take, end to end, before it counts as a timeout.",
        "120",
        default="300",
    ),
    OptionSpec(
        "requestDeadline",
        "request_deadline",
        "Seconds a prompt may take over all its attempts and waits; then its row gets _error.",
        "1800",
        default="900",
    ),
    OptionSpec(
        "maxAttempts",
        "max_attempts",
        "Attempts per request (first try included) on connection errors, timeouts, bodies cut "
        "short, 408, 429 and 5xx; Retry-After / retry-after-ms are honoured.",
        "8",
        default="5",
    ),
    OptionSpec(
        "partitionSize",
        "partition_size",
        "Prompts per Spark task (input partition).",
        "1000",
        default="256",
    ),
    OptionSpec(
        "maxRecordsPerTrigger",
        "max_records_per_trigger",
        "Streaming: at most this many prompts per micro-batch. Default: no limit.",
        "10000",
    ),
    OptionSpec(
        "maxFilesPerTrigger",
        "max_files_per_trigger",
        "Streaming: at most this many prompt files per micro-batch. Default: no limit.",
        "10",
    ),
)

_PARSE_MODES: dict[str, ParseMode] = {
    "auto": "auto",
    "cpu": "cpu",
    "gpu": "gpu",
    "gpu-accelerated": "gpu",
}
_RECORD_MODES: tuple[RecordMode, ...] = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")


@dataclass(frozen=True)
class Options:
    """The reader's options, parsed and checked. Build it with :meth:`Options.parse`."""

    endpoints: tuple[Endpoint, ...] = ()
    prompts: str = ""
    responses: str | None = None
    journal: str | None = None
    metrics: str | None = None
    api_key: Secret | None = None
    api_key_env: str | None = None
    model: str | None = None
    response_format: Mapping[str, Any] | None = field(default=None, compare=False)
    schema_endpoint: str | None = None
    infer_schema_samples: int = 8
    schema_hints: tuple[tuple[tuple[str, ...], DataType], ...] | None = None
    schema_evolution_mode: EvolutionMode = "rescue"
    validate_schema: bool = False
    #: The JSON Schema fetched from schemaEndpoint on the driver (not an option).
    served_schema: Mapping[str, Any] | None = field(default=None, compare=False)
    parse_mode: ParseMode = "auto"
    gpu_memory_fraction: float = 0.1
    mode: RecordMode = "PERMISSIVE"
    system_prompt: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    n: int | None = None
    extra_body: Mapping[str, Any] | None = field(default=None, compare=False)
    max_concurrency: int = 32
    initial_concurrency: int = 8
    adaptive_concurrency: bool = True
    connect_timeout: float = 10.0
    read_timeout: float | None = None
    request_timeout: float = 300.0
    request_deadline: float = 900.0
    max_attempts: int = 5
    partition_size: int = 256
    max_records_per_trigger: int | None = None
    max_files_per_trigger: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, unused: tuple[str, ...] = ()) -> Options:
        """Parse Spark's option dict; raise :class:`OptionError` on the first problem found.

        Options named in ``unused`` do not apply to the caller (e.g. ``prompts`` for
        :func:`dspark_json.generate`): they are neither required nor accepted.
        """
        given: dict[str, tuple[str, str]] = {}  # attr -> (spelling used, value)
        for key, value in raw.items():
            # Spark lower-cases option names; messages use the documented spelling.
            spec, spelling = _BY_SPELLING.get(key.lower(), (None, key))
            if spec is None:
                raise OptionError(_unknown_option_message(key))
            if spec.name in unused:
                raise OptionError(f"Option {spelling!r} does not apply here; leave it out.")
            if spec.attr in given and given[spec.attr][1] != value:
                raise OptionError(
                    f"Options {given[spec.attr][0]!r} and {spelling!r} are two spellings of "
                    f"{spec.name!r} with different values; set only one."
                )
            given[spec.attr] = (spelling, value)
        values: dict[str, Any] = {}
        for spec in OPTION_SPECS:
            if spec.attr in given:
                used, text = given[spec.attr]
            elif spec.default is not None:
                used, text = spec.name, spec.default
            elif spec.required and spec.name not in unused and "responses" not in given:
                raise OptionError(
                    f"Option {spec.name!r} is required: {spec.doc} "
                    f"Example: .option({spec.name!r}, {spec.example!r})."
                )
            else:
                continue
            values[spec.attr] = _CONVERTERS[spec.attr](used, text)
        if "responses" in values and "prompts" in values:
            raise OptionError(
                f"Options {given['prompts'][0]!r} and 'responses' are both set: read prompts "
                "(and call the model) or replay recorded responses, not both."
            )
        if "api_key" in values and "api_key_env" in values:
            raise OptionError(
                f"Options {given['api_key'][0]!r} and 'apiKeyEnv' both give the API key; set "
                "only one (apiKeyEnv keeps the key out of the query's options)."
            )
        return cls(**values)

    @property
    def json_schema(self) -> Mapping[str, Any] | None:
        """The JSON Schema answers should follow: responseFormat, else the served one."""
        return self.response_format if self.response_format is not None else self.served_schema

    @property
    def input_directory(self) -> str:
        """Where the input rows are: the recorded responses, else the prompts."""
        return self.responses if self.responses is not None else self.prompts

    @property
    def endpoint(self) -> str:
        """The first endpoint's URL (without credentials), for messages."""
        return self.endpoints[0].url

    @property
    def key(self) -> ApiKey:
        """Where the API key comes from (resolved where a request is sent)."""
        return ApiKey(self.api_key, self.api_key_env)

    def with_model(self, model: str) -> Options:
        """A copy with the model filled in (resolved from the server on the driver)."""
        return replace(self, model=model)


#: Lower-cased spelling -> (its option, the documented spelling).
_BY_SPELLING: dict[str, tuple[OptionSpec, str]] = {
    spelling.lower(): (spec, spelling)
    for spec in OPTION_SPECS
    for spelling in (spec.name, *spec.aliases)
}


def _unknown_option_message(key: str) -> str:
    names = [spec.name for spec in OPTION_SPECS]
    close = difflib.get_close_matches(key.lower(), list(_BY_SPELLING), n=1, cutoff=0.6)
    hint = f" Did you mean {_BY_SPELLING[close[0]][1]!r}?" if close else ""
    return (
        f"Unknown option {key!r} for format 'dspark-json'.{hint} Known options: {', '.join(names)}."
    )


# --- converters: (spelling used, text) -> value -------------------------------------------------


def _endpoints(name: str, text: str) -> tuple[Endpoint, ...]:
    out = []
    for item in re.split(r"[,\s]+", text.strip()):
        if not item:
            continue
        url, credentials = split_credentials(item.rstrip("/"))
        if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
            raise OptionError(
                f"Option {name!r} must be http(s) URLs of the model server, comma-separated; "
                f"got {redact(item)!r}. Example: 'http://127.0.0.1:8000'."
            )
        out.append(Endpoint(url.removesuffix("/v1"), credentials))
    if not out:
        raise OptionError(
            f"Option {name!r} is empty; give the model server's URL, e.g. 'http://127.0.0.1:8000'."
        )
    return tuple(out)


def _secret(name: str, text: str) -> Secret:
    if not text.strip():
        raise OptionError(f"Option {name!r} is empty; leave it out if the server needs no key.")
    return Secret(text.strip())


def _env_name(name: str, text: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text.strip()):
        raise OptionError(
            f"Option {name!r} must be the NAME of an environment variable (e.g. VLLM_API_KEY), "
            f"got {text!r}. To give the key itself, use option 'apiKey'."
        )
    return text.strip()


def _json_object(name: str, text: str) -> Mapping[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"Option {name!r} must be a JSON object, e.g. '{{\"repetition_penalty\": 1.05}}'; "
            f"{exc.msg} at column {exc.colno} of {text!r}."
        ) from exc
    if not isinstance(value, dict):
        raise OptionError(
            f"Option {name!r} must be a JSON object, got a JSON {type(value).__name__}: {text!r}."
        )
    return value


def _number(
    kind: type[int] | type[float], *, low: float | None = None, high: float | None = None
) -> Callable[[str, str], Any]:
    def convert(name: str, text: str) -> int | float:
        try:
            value = kind(text.strip())
        except ValueError:
            value = None
        if (
            value is None
            or (low is not None and value < low)
            or (high is not None and value > high)
        ):
            noun = "a whole number" if kind is int else "a number"
            bounds = "".join(
                [f" from {low:g}" if low is not None else "", f" to {high:g}" if high else ""]
            )
            raise OptionError(f"Option {name!r} must be {noun}{bounds}, got {text!r}.")
        return value

    return convert


def _boolean(name: str, text: str) -> bool:
    key = text.strip().lower()
    if key not in ("true", "false"):
        raise OptionError(f"Option {name!r} must be true or false, got {text!r}.")
    return key == "true"


def _directory(name: str, text: str) -> str:
    path = text.strip()
    if not path:
        raise OptionError(f"Option {name!r} must name a directory, got ''.")
    return path if is_remote_uri(path) else os.path.abspath(os.path.expanduser(path))


def _nonempty(name: str, text: str) -> str:
    if not text.strip():
        raise OptionError(f"Option {name!r} must not be empty; leave it out to use the default.")
    return text.strip()


def _response_format(name: str, text: str) -> Mapping[str, Any]:
    source = text.strip()
    if not source.startswith(("{", "[")):
        try:
            source = read_text(_directory(name, source))
        except OSError as exc:
            raise OptionError(
                f"Option {name!r} is neither JSON text nor a readable file: {text!r} ({exc}). "
                "Give the path of a JSON Schema file or the schema itself."
            ) from exc
    try:
        schema = json.loads(source)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"Option {name!r} does not hold valid JSON ({exc.msg} at line {exc.lineno}, "
            f"column {exc.colno}). It must be a JSON Schema object."
        ) from exc
    if not isinstance(schema, dict):
        raise OptionError(
            f"Option {name!r} must be a JSON Schema object, got a JSON {type(schema).__name__}."
        )
    # Accept a whole OpenAI response_format object as well as the bare schema.
    if schema.get("type") == "json_schema" and isinstance(schema.get("json_schema"), dict):
        inner = schema["json_schema"].get("schema")
        if not isinstance(inner, dict):
            raise OptionError(
                f"Option {name!r} is a response_format object without json_schema.schema; "
                "put the JSON Schema under json_schema.schema or pass the schema alone."
            )
        return inner
    return schema


def _choice(allowed: Mapping[str, str], *, upper: bool = False) -> Callable[[str, str], Any]:
    def convert(name: str, text: str) -> str:
        key = text.strip().upper() if upper else text.strip().lower()
        if key not in allowed:
            raise OptionError(
                f"Option {name!r} has value {text!r}; allowed values: "
                f"{', '.join(dict.fromkeys(allowed.values()))}."
            )
        return allowed[key]

    return convert


def _positive(kind: type[int] | type[float]) -> Callable[[str, str], Any]:
    def convert(name: str, text: str) -> int | float:
        try:
            value = kind(text.strip())
        except ValueError:
            value = 0
        if value <= 0:
            noun = "a whole number" if kind is int else "a number"
            raise OptionError(f"Option {name!r} must be {noun} above 0, got {text!r}.")
        return value

    return convert


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


_CONVERTERS: dict[str, Callable[[str, str], Any]] = {
    "endpoints": _endpoints,
    "api_key": _secret,
    "api_key_env": _env_name,
    "prompts": _directory,
    "responses": _directory,
    "journal": _directory,
    "metrics": _directory,
    "model": _nonempty,
    "response_format": _response_format,
    "schema_endpoint": _nonempty,
    "infer_schema_samples": _number(int, low=0),
    "schema_hints": lambda name, text: tuple(parse_hints(text, name)),
    "schema_evolution_mode": _choice({"rescue": "rescue", "failonnewcolumns": "failOnNewColumns"}),
    "validate_schema": _boolean,
    "parse_mode": _choice(_PARSE_MODES),
    "gpu_memory_fraction": _fraction,
    "mode": _choice({m: m for m in _RECORD_MODES}, upper=True),
    "system_prompt": _nonempty,
    "max_tokens": _positive(int),
    "temperature": _number(float, low=0),
    "top_p": _number(float, low=0, high=1),
    "seed": _number(int),
    "n": _positive(int),
    "extra_body": _json_object,
    "max_concurrency": _positive(int),
    "initial_concurrency": _positive(int),
    "adaptive_concurrency": _boolean,
    "connect_timeout": _positive(float),
    "read_timeout": _positive(float),
    "request_timeout": _positive(float),
    "request_deadline": _positive(float),
    "max_attempts": _positive(int),
    "partition_size": _positive(int),
    "max_records_per_trigger": _positive(int),
    "max_files_per_trigger": _positive(int),
}


def options_table() -> str:
    """The reference table of every option, in Markdown (the README embeds it verbatim)."""
    lines = [
        "| option | also accepted | default | meaning | example |",
        "|---|---|---|---|---|",
    ]
    for spec in OPTION_SPECS:
        aliases = ", ".join(f"`{a}`" for a in spec.aliases) or ""
        default = "required" if spec.required else (f"`{spec.default}`" if spec.default else "")
        lines.append(f"| `{spec.name}` | {aliases} | {default} | {spec.doc} | `{spec.example}` |")
    return "\n".join(lines)
