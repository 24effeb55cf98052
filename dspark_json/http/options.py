"""The options of the HTTP stage (how to reach the servers) and of the requests (what to ask).

:class:`HttpOptions` is all the client needs, so it is usable without Spark's options:
``complete_all(bodies, HttpOptions(endpoints=(Endpoint("http://vllm:8000"),)))``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dspark_json.errors import OptionError
from dspark_json.fs import is_remote_uri, kind_of, mask_uris, read_text
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.headers import NO_HEADERS, RequestHeaders, request_headers
from dspark_json.http.secrets import (
    ApiKey,
    Secret,
    check_header_value,
    redact,
    split_credentials,
)
from dspark_json.option_spec import (
    boolean,
    directory,
    json_object,
    nonempty,
    number,
    option,
    positive,
)
from dspark_json.rows import load_json
from dspark_json.schema.tools import as_tools
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings, in_effect

__all__ = ["AUTO_HEALTH", "CHAT_COMPLETIONS", "HttpOptions", "RequestOptions"]

#: Where chat completions are sent, on every endpoint.
CHAT_COMPLETIONS = "/v1/chat/completions"


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
        out.append(Endpoint(_check_base_url(name, url), credentials))
    if not out:
        raise OptionError(
            f"Option {name!r} is empty; give the model server's URL, e.g. 'http://127.0.0.1:8000'."
        )
    return tuple(out)


def _check_base_url(name: str, url: str) -> str:
    """``url`` without a trailing ``/v1``. A URL with an API path in it (``/v2``,
    ``/v1/chat/completions``) is not a base URL: say so here, before the checks at ``.load()``
    blame option 'model' for the 404 that follows. Only the path is looked at: a host may be
    named ``models`` or ``v1``."""
    parts = urlsplit(url)
    found = re.search(r"(/v\d+)?(/chat/completions|/completions|/models)?/*$", parts.path)
    assert found is not None  # the pattern matches the empty end of any text
    version, api = found.groups()
    base = urlunsplit(parts._replace(path=parts.path[: found.start()]))
    if api is None and version in (None, "/v1"):
        return base
    raise OptionError(
        f"Option {name!r} must be the server's base URL, got {redact(url)!r}: requests go to "
        f"<base>{CHAT_COMPLETIONS} and the checks to <base>/v1/models. Give {redact(base)!r}."
    )


def _secret(name: str, text: str) -> Secret:
    if not text.strip():
        raise OptionError(f"Option {name!r} is empty; leave it out if the server needs no key.")
    secret = Secret(text.strip())
    check_header_value(secret, f"Option {name!r}")
    return secret


def _env_name(name: str, text: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text.strip()):
        raise OptionError(
            f"Option {name!r} must be the NAME of an environment variable (e.g. VLLM_API_KEY), "
            f"got {text!r}. To give the key itself, use option 'apiKey'."
        )
    return text.strip()


#: Option ``healthPath``'s default: ``/health`` is asked only where ``/v1/models`` says the
#: server is vLLM (:func:`dspark_json.http.preflight.check_model`).
AUTO_HEALTH = "auto"


def _health_path(name: str, text: str) -> str | None:
    """The liveness path checked at ``.load()``; ``None`` (empty, or ``none``) skips it;
    :data:`AUTO_HEALTH` (``auto``) checks vLLM's ``/health`` where the server is vLLM."""
    path = text.strip()
    if path.lower() in ("", "none"):
        return None
    if path.lower() == AUTO_HEALTH:
        return AUTO_HEALTH
    _health_path_bounds(name, path)
    if not path.startswith("/") or "://" in path or any(c in path for c in " ?#\r\n"):
        raise OptionError(
            f"Option {name!r} must be a path on each endpoint starting with '/' (e.g. "
            f"'/health', or LiteLLM's '/health/liveliness'), 'auto' (the default), or empty to "
            f"skip the check; got {redact(text)!r}."
        )
    return path


#: The longest option ``healthPath`` (a liveness path is a few dozen characters).
MAX_HEALTH_PATH = 1024


def _health_path_bounds(name: str, path: str) -> None:
    """Option ``healthPath`` refused where it has a control character, is longer than
    :data:`MAX_HEALTH_PATH`, has a ``.`` or ``..`` segment (``/../../health`` would leave the
    endpoint's base path: the server, or a proxy, resolves it), or an encoded ``/`` or a ``\\``
    (which some servers read as a separator)."""
    bad = next((c for c in path if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        problem = f"has a control character ({bad!r})"
    elif len(path) > MAX_HEALTH_PATH:
        problem = f"is {len(path)} characters long, over {MAX_HEALTH_PATH}"
    elif "\\" in path or "%2f" in path.lower() or "%5c" in path.lower():
        problem = "has an encoded '/' or a '\\', which a server may read as a path separator"
    elif any(segment.lower().replace("%2e", ".") in (".", "..") for segment in path.split("/")):
        problem = "has a '.' or '..' segment, which would leave the endpoint's base path"
    else:
        return
    raise OptionError(
        f"Option {name!r} {problem}: {redact(path[:80])!r}{'...' if len(path) > 80 else ''}. "
        "Give the path on each endpoint, under its base URL, e.g. '/health' (LiteLLM: "
        "'/health/liveliness'), 'auto' (the default), or empty to skip the check."
    )


def _json_or_file(name: str, source: str, what: str) -> str:
    """``source`` itself when it is JSON text (starts with { or [), else the text of the file
    it names."""
    if source.startswith(("{", "[")):
        return source
    if is_remote_uri(source) and ("?" in source or "#" in source):
        raise OptionError(
            f"Option {name!r} names a file by a URI with a query string or fragment "
            f"({mask_uris(source)}): give the file's URI without it, and the store's endpoint "
            "and credentials in option 'storageOptions' (docs/guide/object-stores.md)."
        )
    path = directory(name, source)
    try:
        storage = in_effect()  # the query's storageOptions, while its options are parsed
        if kind_of(path, storage=storage) != "file":  # a device or a FIFO is read forever
            raise FileNotFoundError(f"{path} is not a regular file")
        return read_text(path, storage=storage)
    except (OSError, ValueError) as exc:
        raise OptionError(
            f"Option {name!r} is neither JSON text nor a readable file: "
            f"{mask_uris(source)!r} ({mask_uris(str(exc))}). "
            f"Give the path of a file that holds {what}, or {what} itself."
        ) from None


def _tools(name: str, text: str) -> tuple[dict[str, Any], ...]:
    return as_tools(_json_or_file(name, text.strip(), "a JSON list of tool definitions"), name)


def _tool_choice(name: str, text: str) -> str:
    word = text.strip()
    if word.lower() in ("auto", "required", "none"):
        return word.lower()
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", word):
        raise OptionError(
            f"Option {name!r} must be auto, required, none or a function name of option "
            f"'tools', got {text!r}."
        )
    return word


def _response_format(name: str, text: str) -> Mapping[str, Any]:
    source = text.strip()
    if source.startswith("<class "):  # str() of a Python class, e.g. a Pydantic model
        raise OptionError(
            f"Option {name!r} got a Python class ({source}), which Spark turns into its name. "
            "Pass its JSON Schema as text: json.dumps(Model.model_json_schema()) for a "
            "Pydantic model, or the path of a JSON Schema file."
        )
    source = _json_or_file(name, source, "a JSON Schema")
    try:
        schema = load_json(source)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"Option {name!r} does not hold valid JSON ({exc.msg} at line {exc.lineno}, "
            f"column {exc.colno}). It must be a JSON Schema object."
        ) from exc
    except ValueError as exc:  # nested too deep, or an integer beyond Python's digit limit
        raise OptionError(
            f"Option {name!r} is not a usable JSON Schema ({exc}). It must be a JSON Schema object."
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


def _refresh_seconds(name: str, text: str) -> float:
    """Seconds between two looks at the replicas: 1 at least (each look reads endpointsFile,
    resolves the names and asks every endpoint's /v1/models, in every running task)."""
    try:
        value = number(float, low=1.0)(name, text)
    except OptionError as exc:
        raise OptionError(
            f"{exc} Each look reads endpointsFile, resolves the host names and asks every "
            "endpoint's /v1/models, in every running task: give 1 or more (the default is "
            "30)."
        ) from None
    return float(value)


@dataclass(frozen=True, kw_only=True)
class HttpOptions:
    """Where the servers are, how many requests at once, how long, how often."""

    endpoints: tuple[Endpoint, ...] = option(
        "endpoint",
        "Base URL of the vLLM / OpenAI-compatible server (a trailing /v1 is accepted). Several, "
        "comma-separated, share the load; one that keeps failing rests until its /v1/models "
        "answers again (then one more failure rests it again). Credentials in the URL "
        "(user:pass@) are sent as Basic auth and never shown. Required, except with option "
        "endpointsFile (its replicas) or responses (recorded answers, no server).",
        "http://vllm-a:8000,http://vllm-b:8000",
        convert=_endpoints,
        aliases=("vllm_endpoint",),
        required=True,  # unless option responses replays recorded answers
        empty=(),
    )
    api_key: Secret | None = option(
        "apiKey",
        "API key sent as 'Authorization: Bearer <key>'. Never shown in logs, errors, explain() "
        "or progress (call dspark_json.register(spark) so Spark redacts it from plans). "
        "Prefer apiKeyEnv.",
        "sk-...",
        convert=_secret,
        aliases=("api_key", "vllm_api_key"),
    )
    api_key_env: str | None = option(
        "apiKeyEnv",
        "Name of an environment variable that holds the API key, read where requests are sent "
        "(the executors) and, for the checks at .load(), on the driver.",
        "VLLM_API_KEY",
        convert=_env_name,
    )
    health_path: str | None = option(
        "healthPath",
        "Path that .load() GETs on each endpoint to see the server is up (a 5xx fails it). "
        "auto: /v1/models first (no completion; asked whatever this is), then vLLM's /health "
        "only where every model listed says owned_by vllm (a 5xx: its engine is down). So "
        "other servers' /health (SGLang, TGI, llama.cpp) is not asked, nor a gateway's: "
        "LiteLLM's sends a completion to every model behind it, and LiteLLM in front of a dead "
        "vLLM passes .load() (its rows end with http errors); behind vllm-router, which passes "
        "vLLM's list on, a 503 that names unhealthy workers is a WARN (completions go to the "
        "others). A path: GET first, before /v1/models, on any server. Empty (or none) skips "
        "it. Benched endpoints are probed at /v1/models, not here.",
        "/health/liveliness",
        convert=_health_path,
        default=AUTO_HEALTH,
    )
    max_concurrency: int = option(
        "maxConcurrency",
        "Most requests in flight per Spark task. The load on the server is up to this times "
        "the number of tasks running at once.",
        "64",
        convert=positive(int),
        default="32",
    )
    initial_concurrency: int = option(
        "initialConcurrency",
        "Requests in flight per task at the start; the limit then adapts between 1 and "
        "maxConcurrency (up while latency holds, down on timeouts, 429, 5xx and growing "
        "latency, as vLLM queues instead of refusing).",
        "4",
        convert=positive(int),
        default="8",
    )
    adaptive_concurrency: bool = option(
        "adaptiveConcurrency",
        "Adapt the in-flight limit (true) or keep maxConcurrency requests in flight (false).",
        "false",
        convert=boolean,
        default="true",
    )
    connect_timeout: float = option(
        "connectTimeout",
        "Seconds to open a connection to the server.",
        "5",
        convert=positive(float),
        default="10",
    )
    read_timeout: float | None = option(
        "readTimeout",
        "Seconds the server may stay silent while answering: each piece of the answer received "
        "starts it again, so a server that keeps sending, however slowly, is bounded by "
        "requestTimeout alone (vLLM sends a non-streamed answer at the end, so this is at least "
        "the generation time). Default: requestTimeout.",
        "120",
        convert=positive(float),
    )
    request_timeout: float = option(
        "requestTimeout",
        "Seconds one attempt may take, end to end, before it counts as a timeout.",
        "120",
        convert=positive(float),
        default="300",
    )
    request_deadline: float = option(
        "requestDeadline",
        "Seconds a prompt may take over all its attempts and waits (rate-limited retries "
        "included); then its row gets _error (endpoint_unavailable while every endpoint is "
        "down). 600: two attempts that each take "
        "the whole requestTimeout, or time for a restarting vLLM to load its model again; a "
        "longer outage fails the rows instead of holding the micro-batch (and while prompts "
        "wait, a WARN every 30 s names the endpoint).",
        "1800",
        convert=positive(float),
        default="600",
    )
    max_attempts: int = option(
        "maxAttempts",
        "Attempts per request (first try included) on connection errors, timeouts, bodies cut "
        "short, 408 and 5xx. A rate limit (429, or a 503 with a retry hint; not a 429 for a "
        "spent quota, insufficient_quota), and a pool shedding the request (llm-d's 429 with "
        "x-llm-d-request-dropped-reason, a gateway's 503 'no healthy upstream') are not counted: "
        "they are retried while requestDeadline allows, after the server's hint (Retry-After, "
        "retry-after-ms, LiteLLM's llm_provider-retry-after, OpenAI's x-ratelimit-reset-*; "
        "0.1 s to 60 s) or backoff.",
        "8",
        convert=positive(int),
        default="5",
    )
    prefix_order: bool = option(
        "prefixOrder",
        "Send a task's requests grouped by shared message prefix (longest shared prefixes "
        "together), each group to one endpoint (rendezvous hashing on its first 1 KiB of "
        "messages, within an even share of the requests; the next endpoint when it rests), so "
        "that vLLM's prefix cache holds the prefixes it is asked for. Rows keep their order; "
        "false sends in row order, round-robin over the endpoints.",
        "false",
        convert=boolean,
        default="true",
    )
    max_response_bytes: int = option(
        "maxResponseBytes",
        "Largest response body accepted, in bytes, as received and once decompressed (a "
        "server or proxy that sends Content-Encoding gzip or deflate); a larger one is a row "
        "with _error type response_too_large, not retried.",
        "268435456",
        convert=positive(int),
        default="67108864",
    )
    max_server_queue: int | None = option(
        "maxServerQueue",
        "Send only into the capacity a shared pool leaves free: hold back new requests (never "
        "those in flight) to an endpoint whose /metrics (vLLM's, read about once a second "
        "per machine, its tasks sharing the reading) shows more than this many requests "
        "waiting, or its KV cache at least 80% full, or is older than 2 s. An endpoint "
        "without vLLM's /metrics (a gateway) gets one WARN and the latency-driven limit "
        "only. Off by default.",
        "0",
        convert=number(int, low=0),
    )

    max_tokens_per_minute: int | None = option(
        "maxTokensPerMinute",
        "Stay under a gateway key's tokens-per-minute limit (LiteLLM's tpm, a provider's "
        "quota): the answers' usage over the last minute plus an estimate of the requests in "
        "flight (body bytes / 4 + max_tokens, else 512: set maxTokens) never passes it. Shared "
        "evenly by the tasks of a micro-batch (each gets its share, so all together stay under "
        "it even at once); with option metrics the minute goes on across micro-batches (each "
        "starts with what the last ones spent in it). Off by default.",
        "200000",
        convert=positive(int),
    )
    max_tokens_in_flight: int | None = option(
        "maxTokensInFlight",
        "Most tokens (estimated as for maxTokensPerMinute) a task has in flight at one "
        "endpoint, as the inference extension's token mode bounds a server's load; per task, "
        "so an endpoint's load is up to this times the tasks at once. Off by default.",
        "32768",
        convert=positive(int),
    )

    endpoints_file: str | None = option(
        "endpointsFile",
        "A file (local path or object-store URL) with one base URL per line (blank lines and "
        "comments ignored: # at a line's start or after a space): replicas used besides "
        "option endpoint (or instead of it), re-read every "
        "endpointRefreshSeconds by the running tasks. A new replica gets requests once its "
        "/v1/models lists their model; a removed one gets no new request (its requests in "
        "flight finish, or are retried elsewhere). A file that lists none is a pool scaled to "
        "zero: sending pauses and rows wait until requestDeadline (at .load(), option model is "
        "then needed). Each listed URL receives the API key: "
        "whoever can write the file can have the key sent to a server of theirs.",
        "s3://pool/replicas.txt",
        convert=directory,
    )
    endpoint_refresh_seconds: float = option(
        "endpointRefreshSeconds",
        "Seconds between two looks at the replicas: endpointsFile read again, host names "
        "resolved again, each endpoint's /v1/models fetched again (also at once when a replica "
        "answers 404 for a model). 1 at least.",
        "10",
        convert=_refresh_seconds,
        default="30",
    )
    resolve_endpoints: bool = option(
        "resolveEndpoints",
        "A host name in option endpoint stands for every address it resolves to (a Kubernetes "
        "headless service: one address per ready replica), resolved again every "
        "endpointRefreshSeconds; the Host header and the TLS name stay the name. Without it a "
        "name is expanded only when it resolves to several addresses when a task starts. A "
        "name reached through a proxy (HTTP(S)_PROXY) is never expanded: the proxy resolves it.",
        "true",
        convert=boolean,
        default="false",
    )

    request_headers: RequestHeaders = option(
        "requestHeaders",
        "A JSON object of headers sent with every request to the endpoints (completions, "
        "/v1/models, /metrics, the checks at .load()): llm-d's x-llm-d-inference-objective "
        "(a sheddable objective marks the stream as batch), x-llm-d-inference-fairness-id, "
        "x-llm-d-slo-ttft-ms, or a gateway's own. Names are HTTP tokens, not Host, "
        "Content-Length, Transfer-Encoding, Connection or Content-Type; values printable ASCII; "
        "Authorization only with allowAuthorizationHeader. Values whose names look like "
        "credentials (key, token, secret, auth, cookie...) are never shown.",
        '{"x-llm-d-inference-objective": "batch-sheddable"}',
        convert=request_headers,
        empty=NO_HEADERS,
    )
    allow_authorization_header: bool = option(
        "allowAuthorizationHeader",
        "Let option requestHeaders set Authorization (or Proxy-Authorization) as given, for a "
        "gateway whose scheme is not a Bearer key; not beside apiKey, apiKeyEnv or credentials "
        "in an endpoint's URL.",
        "true",
        convert=boolean,
        default="false",
    )

    def __post_init__(self) -> None:
        other = (
            "apiKey"
            if self.api_key is not None
            else "apiKeyEnv"
            if self.api_key_env is not None
            else "endpoint"
            if any(e.credentials is not None for e in self.endpoints)
            else None
        )
        self.request_headers.check_authorization(
            allowed=self.allow_authorization_header, other=other
        )

    @property
    def key(self) -> ApiKey:
        """Where the API key comes from (resolved where a request is sent)."""
        return ApiKey(self.api_key, self.api_key_env)

    @property
    def endpoint(self) -> str:
        """The first endpoint's URL (without credentials), for messages."""
        return self.endpoints[0].url if self.endpoints else "(option endpointsFile's endpoints)"

    #: How option ``endpointsFile``'s store is reached: the query's storage settings (option
    #: ``storageOptions``), set by :meth:`dspark_json.options.Options.parse`. A second copy of
    #: ``Options.storage.settings``, kept because the preflight and the endpoint reader are
    #: handed ``HttpOptions`` alone (the http layer sits below ``options``).
    storage: StorageSettings = field(default=ENVIRONMENT_ONLY, compare=False)
    #: Set by the driver for a micro-batch's task (``dspark_json.source``), not an option:
    #: (machines, tasks at once) of the stream's last micro-batches, so that the tasks of all
    #: the machines split a ``/metrics`` reading's room (``http.gauges.across``); ``None``
    #: where unknown (a batch read, the first micro-batch).
    pool_width: tuple[int, int] | None = field(default=None, compare=False)
    #: Set by the driver likewise: the task's share of the tokens the stream's last
    #: micro-batches spent within the minute, as (wall time, tokens), so that option
    #: maxTokensPerMinute's minute goes on across micro-batches (``http.tokens``).
    tokens_spent: tuple[tuple[float, int], ...] = field(default=(), compare=False)


@dataclass(frozen=True, kw_only=True)
class RequestOptions:
    """What each chat completion request asks of the model, besides the prompt."""

    model: str | None = option(
        "model",
        "Model name sent with each request. Default: the first model the server lists at "
        "/v1/models.",
        "Qwen/Qwen3-8B",
        convert=nonempty,
    )
    response_format: Mapping[str, Any] | None = option(
        "responseFormat",
        "JSON Schema the model must follow (a path, or the JSON text itself; a full OpenAI "
        "response_format object is accepted too). Sent as response_format and used to type "
        "the `parsed` column.",
        "/data/schema.json",
        convert=_response_format,
    )
    tools: tuple[dict[str, Any], ...] | None = option(
        "tools",
        "Functions the model may call (function calling): a JSON list of OpenAI tool "
        "definitions, or the path of a file holding one. Sent as tools; each function's "
        "calls land in column tool_calls.<name>, arguments typed from its parameters "
        "(inferred from sample answers where a tool has none). A batch line's own tools win.",
        '[{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}]',
        convert=_tools,
    )
    tool_choice: str | None = option(
        "toolChoice",
        "Which function the model calls (sent as tool_choice): auto, required, none, or a "
        "function name of option tools (vLLM then enforces its parameters with guided "
        "decoding).",
        "get_weather",
        convert=_tool_choice,
    )
    system_prompt: str | None = option(
        "systemPrompt",
        "System message put before each prompt's messages (not where a prompt has its own).",
        "Answer in JSON.",
        convert=nonempty,
        aliases=("system_prompt",),
    )
    max_tokens: int | None = option(
        "maxTokens",
        "max_tokens of each request.",
        "512",
        convert=positive(int),
        aliases=("max_tokens",),
    )
    temperature: float | None = option(
        "temperature",
        "Sampling temperature of each request (0 or more).",
        "0",
        convert=number(float, low=0),
    )
    top_p: float | None = option(
        "topP",
        "top_p of each request (above 0, at most 1).",
        "0.9",
        convert=number(float, low=0, high=1),
        aliases=("top_p",),
    )
    seed: int | None = option("seed", "Sampling seed of each request.", "42", convert=number(int))
    priority: int | None = option(
        "priority",
        "vLLM's request priority, sent as priority: lower is served first, so a batch job "
        "beside interactive traffic (priority 0) wants a higher number. The server must run "
        "with --scheduling-policy priority; .load() checks it with one request.",
        "10",
        convert=number(int),
    )
    n: int | None = option(
        "n",
        "Choices per prompt (the `choices` array holds them; `parsed` is the first).",
        "2",
        convert=positive(int),
    )
    extra_body: Mapping[str, Any] | None = option(
        "extraBody",
        "JSON object merged into every request body, for server-specific fields "
        "(vLLM's guided_decoding_backend, repetition_penalty, chat_template_kwargs...).",
        '{"repetition_penalty": 1.05}',
        convert=json_object,
        aliases=("extra_body",),
    )
