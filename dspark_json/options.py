"""Typed, validated reader options.

Spark hands a data source its options as a case-insensitive dict of strings. They are parsed once,
on the driver, into a frozen :class:`Options` that travels to the executors with the reader, so a
bad value fails at ``.load()`` with a message that names the option, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from dspark_json.errors import OptionError
from dspark_json.fs import is_remote_uri, read_text

__all__ = ["OPTION_SPECS", "OptionSpec", "Options", "options_table"]

ParseMode = Literal["auto", "cpu", "gpu"]
RecordMode = Literal["PERMISSIVE", "DROPMALFORMED", "FAILFAST"]


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
        "endpoint",
        "Base URL of the vLLM / OpenAI-compatible server (a trailing /v1 is accepted).",
        "http://vllm:8000",
        aliases=("vllm_endpoint",),
        required=True,
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
        "maxConcurrency",
        "max_concurrency",
        "Requests in flight per Spark task. The load on the server is this times the number "
        "of tasks running at once.",
        "64",
        default="32",
    ),
    OptionSpec(
        "requestTimeout",
        "request_timeout",
        "Seconds one HTTP request may take, end to end, before it counts as failed.",
        "120",
        default="60",
    ),
    OptionSpec(
        "maxAttempts",
        "max_attempts",
        "Attempts per request (first try included) on connection errors, timeouts, 408, 429 "
        "and 5xx.",
        "5",
        default="3",
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

    endpoint: str
    prompts: str
    model: str | None = None
    response_format: Mapping[str, Any] | None = field(default=None, compare=False)
    parse_mode: ParseMode = "auto"
    gpu_memory_fraction: float = 0.1
    mode: RecordMode = "PERMISSIVE"
    max_concurrency: int = 32
    request_timeout: float = 60.0
    max_attempts: int = 3
    partition_size: int = 256
    max_records_per_trigger: int | None = None
    max_files_per_trigger: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> Options:
        """Parse Spark's option dict; raise :class:`OptionError` on the first problem found."""
        given: dict[str, tuple[str, str]] = {}  # attr -> (spelling used, value)
        for key, value in raw.items():
            # Spark lower-cases option names; messages use the documented spelling.
            spec, spelling = _BY_SPELLING.get(key.lower(), (None, key))
            if spec is None:
                raise OptionError(_unknown_option_message(key))
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
            elif spec.required:
                raise OptionError(
                    f"Option {spec.name!r} is required: {spec.doc} "
                    f"Example: .option({spec.name!r}, {spec.example!r})."
                )
            else:
                continue
            values[spec.attr] = _CONVERTERS[spec.attr](used, text)
        return cls(**values)

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


def _endpoint(name: str, text: str) -> str:
    url = text.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise OptionError(
            f"Option {name!r} must be an http(s) URL of the model server, got {text!r}. "
            "Example: 'http://127.0.0.1:8000'."
        )
    return url.removesuffix("/v1")


def _directory(name: str, text: str) -> str:
    path = text.strip()
    if not path:
        raise OptionError(f"Option {name!r} must name a directory of prompt files, got ''.")
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
                f"Option {name!r} has value {text!r}; allowed values: {', '.join(allowed)}."
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
    "endpoint": _endpoint,
    "prompts": _directory,
    "model": _nonempty,
    "response_format": _response_format,
    "parse_mode": _choice(_PARSE_MODES),
    "gpu_memory_fraction": _fraction,
    "mode": _choice({m: m for m in _RECORD_MODES}, upper=True),
    "max_concurrency": _positive(int),
    "request_timeout": _positive(float),
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
