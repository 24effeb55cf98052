"""The driver's requests at ``.load()``: is each endpoint up, does it serve the model, and the
JSON Schema it serves (option ``schemaEndpoint``).

A query that cannot work fails here, with the URL, the cause and the option to fix, instead of
as thousands of ``_error`` rows later. Each request is bounded as a completion is: its body by
option ``maxResponseBytes`` (as received and once decompressed: the transport's reader,
:func:`~dspark_json.http.transport.read_body`), its head by the transport's header bounds, and
the whole request (connect, send, read) by :data:`CHECK_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from dspark_json.errors import OptionError, ServerError
from dspark_json.http.client import auth_headers
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.headers import NO_HEADERS, RequestHeaders
from dspark_json.http.options import AUTO_HEALTH, HttpOptions
from dspark_json.http.replicas import read_endpoints_file
from dspark_json.http.secrets import Secret, redact
from dspark_json.http.transport import (
    BodyRefused,
    BodyTooLarge,
    StreamTransport,
    proxy_for,
    read_body,
)
from dspark_json.rows import load_json

__all__ = [
    "CHECK_TIMEOUT_S",
    "check_model",
    "check_priority",
    "check_server",
    "fetch_served_schema",
    "http_get",
]

logger = logging.getLogger("dspark_json")

#: Seconds each request at ``.load()`` may take, connect, send and read together.
CHECK_TIMEOUT_S = 10.0
#: Endpoints checked at once at ``.load()`` (connections the driver opens at once).
CHECK_CONNECTIONS = 32
#: Seconds one kind of check at ``.load()`` may take over all the endpoints together (the
#: endpoints not checked by then are left to the executors' probes, with a WARN).
CHECK_TOTAL_S = 120.0
#: Seconds an endpoint found unusable by :func:`check_model` is skipped by the later checks.
DOWN_MEMORY_S = 300.0

#: The endpoints :func:`check_model` found unusable, with when (``time.monotonic()``).
_DOWN: dict[Endpoint, float] = {}

_T = TypeVar("_T")


def _known_down(endpoint: Endpoint) -> bool:
    since = _DOWN.get(endpoint)
    return since is not None and time.monotonic() - since < DOWN_MEMORY_S


def each_endpoint(
    endpoints: Sequence[Endpoint], check: Callable[[Endpoint], _T]
) -> list[tuple[Endpoint, _T | ServerError | None]]:
    """``check`` of each endpoint, :data:`CHECK_CONNECTIONS` at once, within
    :data:`CHECK_TOTAL_S` in all; in the endpoints' order, each with its result, its
    :class:`ServerError`, or ``None`` where it was not checked in time (one WARN counts
    those). Any other error is raised here."""
    results: dict[int, object] = {}
    queue = deque(enumerate(endpoints))
    lock = threading.Lock()
    finished = threading.Event()
    if not endpoints:
        return []

    def work() -> None:
        while True:
            with lock:
                if not queue or finished.is_set():
                    return
                index, endpoint = queue.popleft()
            try:
                result: object = check(endpoint)
            except BaseException as exc:  # handed to the caller's thread
                result = exc
            with lock:
                results[index] = result
                if len(results) == len(endpoints):
                    finished.set()

    for _ in range(min(CHECK_CONNECTIONS, len(endpoints))):  # daemons: none outlives a check
        threading.Thread(target=work, name="dspark-json-check", daemon=True).start()
    finished.wait(CHECK_TOTAL_S)
    with lock:
        finished.set()  # the workers take no more
        done = dict(results)
    for value in done.values():
        if isinstance(value, BaseException) and not isinstance(value, ServerError):
            raise value
    missing = len(endpoints) - len(done)
    if missing:
        logger.warning(
            "%d of %d endpoints were not checked within %g s (the bound of the checks at "
            ".load(), %d at once); they are left to the executors' probes.",
            missing,
            len(endpoints),
            CHECK_TOTAL_S,
            CHECK_CONNECTIONS,
        )
    return [(e, done.get(i)) for i, e in enumerate(endpoints)]  # type: ignore[misc]


def check_server(options: HttpOptions, model: str | None) -> str:
    """Reach option ``healthPath`` and ``/v1/models`` of every endpoint; return the model to use
    (``model``, else the first one the first reachable endpoint lists). See
    :func:`check_model`."""
    return check_model(options, model)[0]


def _driver_key(options: HttpOptions) -> Secret | None:
    """The key the driver's checks send; a WARN where option ``apiKeyEnv`` names a variable
    the driver does not have (the executors read it where they run)."""
    key = options.key.resolve()
    if options.api_key_env is not None and key is None:
        logger.warning(
            "Option 'apiKeyEnv': %s is not set on the driver; checking the server without a key "
            "(the executors read it where they run).",
            options.api_key_env,
        )
    return key


def _scaled_to_zero(options: HttpOptions, model: str | None) -> str:
    """The model of a pool with no endpoint now (option ``endpointsFile`` alone, empty):
    option ``model`` (nothing to read one from), and a WARN that nothing was checked."""
    if model is None:
        raise OptionError(
            f"Option 'endpointsFile' ({redact(str(options.endpoints_file))}) lists no "
            "endpoint now, so the model to ask cannot be read from one: set option 'model' "
            "(the stream then waits for a replica), or start one first."
        )
    logger.warning(
        "Option 'endpointsFile' lists no endpoint now (a pool scaled to zero?): nothing was "
        "checked; the tasks wait for a replica, each prompt until requestDeadline=%gs.",
        options.request_deadline,
    )
    return model


def check_model(options: HttpOptions, model: str | None) -> tuple[str, int | None]:
    """Reach option ``healthPath`` (where set; ``auto``: vLLM's ``/health`` after
    ``/v1/models``, only where that says vLLM) and ``/v1/models`` of every endpoint; return the
    model to use (``model``, else the first one the first reachable endpoint lists) and its
    context length (vLLM's ``max_model_len`` in the list, the smallest the endpoints give;
    ``None`` where no endpoint says).

    Raises :class:`ServerError` when no endpoint is usable; an endpoint that is down while
    another works is logged and left to the executors' health probes.
    """
    key = _driver_key(options)
    problems: list[str] = []
    context: int | None = None
    endpoints = _all_endpoints(options)
    if not endpoints:  # option endpointsFile alone, empty: a pool scaled to zero
        return _scaled_to_zero(options, model), None
    others: dict[str, list[str]] = {}  # endpoint -> its models, where it lacks the model
    outcomes = each_endpoint(
        endpoints,
        lambda e: _served_models(
            e,
            key,
            options.max_response_bytes,
            health=options.health_path,
            sent=options.request_headers,
        ),
    )
    for endpoint, outcome in outcomes:
        if isinstance(outcome, ServerError):
            if len(endpoints) == 1:
                raise outcome
            _DOWN[endpoint] = time.monotonic()
            problems.append(str(outcome))
            if len(problems) <= _SHOWN:
                logger.warning("%s Continuing with the other endpoints.", outcome)
            continue
        if outcome is None:  # not checked within CHECK_TOTAL_S
            continue
        _DOWN.pop(endpoint, None)
        served = outcome
        if model is None:
            if not served:
                raise ServerError(
                    f"The model server at {endpoint.url}/v1/models lists no model; set option "
                    "'model'."
                )
            model = next(iter(served))
            logger.info(
                "Option 'model' not set; using %r, the first model %s serves.", model, endpoint.url
            )
        elif model not in served:
            # Several models in a pool: requests for it go to the endpoints that serve it.
            others[endpoint.url] = list(served)
            continue
        length = served[model]
        if length is not None and (context is None or length < context):
            context = length  # a re-ask must fit the smallest context of the endpoints
    if len(others) == 1 and len(endpoints) == 1:
        url, served_there = next(iter(others.items()))
        raise ServerError(
            f"Model {model!r} is not served by {url} (it serves: "
            f"{_few(served_there) or 'nothing'}). Fix option 'model', or option 'endpoint'."
        )
    if others and len(others) + len(problems) == len(endpoints):
        listed = "; ".join(
            f"{url} serves {_few(m) or 'nothing'}" for url, m in list(others.items())[:_SHOWN]
        ) + (f" and {len(others) - _SHOWN} more endpoints" if len(others) > _SHOWN else "")
        raise ServerError(
            f"Model {model!r} is not served by any endpoint ({listed}). Fix option 'model', or "
            "option 'endpoint'."
        )
    if others:
        logger.info(
            "Model %r is not served by %s; its requests go to the endpoints that serve it.",
            model,
            _few(list(others)),
        )
    if len(problems) > _SHOWN:
        logger.warning(
            "%d more endpoints cannot be used (%d of %d in all); continuing with the others.",
            len(problems) - _SHOWN,
            len(problems),
            len(endpoints),
        )
    if model is None or len(problems) == len(endpoints):
        shown = " | ".join(problems[:_SHOWN])
        if len(problems) > _SHOWN:
            shown += f" | and {len(problems) - _SHOWN} more endpoints"
        unchecked = len(endpoints) - len(problems) - sum(1 for _, o in outcomes if o is not None)
        if unchecked:
            shown += f" | {unchecked} not checked within {CHECK_TOTAL_S:g} s"
        raise ServerError("No endpoint is usable: " + shown)
    return model, context


#: Values a message shows of a list (the rest counted).
_SHOWN = 5


def _few(values: Sequence[str]) -> str:
    """The first :data:`_SHOWN` of ``values`` (each cut to 80 characters) and how many more:
    a server's list of a million model ids makes a message of a few lines, not megabytes."""
    cut = [v if len(v) <= 80 else v[:77] + "..." for v in values[:_SHOWN]]
    more = (
        f" and {len(values) - _SHOWN} more ({len(values)} in all)" if len(values) > _SHOWN else ""
    )
    return ", ".join(cut) + more


def check_line_models(options: HttpOptions, named: Mapping[str, int]) -> None:
    """The models the sampled prompt lines name (``named``: each with its count of lines,
    :func:`dspark_json.inputs.prompts.line_models`) against those the endpoints serve: where
    no endpoint serves any of them, the lines' ``model`` field most likely means something
    else (a car's or a phone's model) and every row would wait ``requestDeadline`` to end
    ``model_unavailable``: :class:`ServerError`, naming a few values, the models served and
    the fix. Where some are served and some not, one WARN names those not served (a replica
    may serve them later). An endpoint that cannot be reached is left out (:func:`check_model`
    has said so)."""
    if not named:
        return
    key = options.key.resolve()
    served: dict[str, None] = {}
    reached = 0
    endpoints = [e for e in _all_endpoints(options) if not _known_down(e)]
    for _, outcome in each_endpoint(
        endpoints,
        lambda e: _served_models(e, key, options.max_response_bytes, sent=options.request_headers),
    ):
        if outcome is None or isinstance(outcome, ServerError):
            continue
        served.update(dict.fromkeys(outcome))
        reached += 1
    if reached == 0:
        return
    missing = [m for m in named if m not in served]
    if not missing:
        return
    secrets = [key, *(e.credentials for e in options.endpoints)]

    def shown(values: Sequence[str]) -> str:
        cut = [redact(v, secrets) for v in values[:_SHOWN]]
        text = ", ".join(repr(v if len(v) <= 80 else v[:77] + "...") for v in cut)
        return text + (f" and {len(values) - _SHOWN} more" if len(values) > _SHOWN else "")

    offered = shown(list(served)) or "nothing"
    if len(missing) == len(named):
        lines = sum(named.values())
        raise ServerError(
            f"The prompt lines' 'model' field names models no endpoint serves: {shown(missing)} "
            f"(in {lines} of the lines sampled); the endpoints serve {offered}. A line's "
            "'model' (or 'body.model') names the model to ask: where the field means something "
            "else in this data (a product's model), rename it in the data (e.g. to "
            "'product_model': it is then passed through as a column of that name), or serve "
            "those models."
        )
    logger.warning(
        "Prompt lines name models no endpoint serves now: %s; the endpoints serve %s. Their "
        "rows wait for a replica that serves them until requestDeadline (then _error.type "
        "model_unavailable); rename the field in the data if it does not name a model.",
        shown(missing),
        offered,
    )


def _all_endpoints(options: HttpOptions) -> tuple[Endpoint, ...]:
    """Option ``endpoint``'s endpoints and option ``endpointsFile``'s (read here: an error in
    the file fails ``.load()``, naming the option)."""
    if options.endpoints_file is None:
        return options.endpoints
    # Empty: a pool scaled to zero (check_model says what it can check then).
    listed = read_endpoints_file(options.endpoints_file, storage=options.storage, allow_empty=True)
    return tuple(dict.fromkeys((*options.endpoints, *listed)))


def _served_models(
    endpoint: Endpoint,
    key: Secret | None,
    limit: int | None = None,
    *,
    health: str | None = None,
    sent: RequestHeaders = NO_HEADERS,
) -> dict[str, int | None]:
    """The models ``endpoint`` lists, each with its context length where it gives one; its
    ``health`` path (option ``healthPath``) asked first where given (``auto``: ``/health``
    after the list, where the list says vLLM: :func:`_check_health`)."""
    secrets = [key, endpoint.credentials, *sent.secrets()]
    headers = {**sent.sent(), **auth_headers(key, endpoint)}  # option requestHeaders too
    if health is not None and health != AUTO_HEALTH:
        _check_health(endpoint, health, headers, key=key, secrets=secrets, limit=limit)
    url = f"{endpoint.url}/v1/models"
    response = http_get(url, headers, secrets, limit=limit)
    refused = _refused(url, response, key, secrets)
    if refused is not None:
        raise refused
    if response.status_code != 200:
        raise ServerError(
            f"The model server at {url} answered HTTP {response.status_code}: "
            f"{redact(response.text, secrets)[:200]!r}. Check option 'endpoint', or set option "
            "'model'."
        )
    try:
        cards = load_json(response.content)["data"]
        served = {str(item["id"]): _length(item.get("max_model_len")) for item in cards}
    except (ValueError, KeyError, TypeError) as exc:
        raise ServerError(
            f"The answer of {url} is not an OpenAI model list; check option 'endpoint'."
        ) from exc
    if health == AUTO_HEALTH and cards and all(_owned_by_vllm(card) for card in cards):
        _check_health(
            endpoint, "/health", headers, key=key, secrets=secrets, limit=limit, auto=True
        )
    return served


def _owned_by_vllm(card: Any) -> bool:
    """Whether a ``/v1/models`` entry is vLLM's (``owned_by: vllm``; LiteLLM's say
    ``openai``). vllm-router passes its workers' list on, so it looks like vLLM too."""
    return isinstance(card, dict) and card.get("owned_by") == "vllm"


#: What vllm-router's ``/health`` answers while some of its workers are down (503): an
#: aggregate of the workers behind it, not the state of the endpoint itself.
_ROUTER_AGGREGATE = "Unhealthy servers"


def _check_health(
    endpoint: Endpoint,
    health: str,
    headers: dict[str, str],
    *,
    key: Secret | None,
    secrets: list[Secret | None],
    limit: int | None,
    auto: bool = False,
) -> None:
    """GET ``health`` (option ``healthPath``; ``auto``: vLLM's ``/health`` on a server whose
    ``/v1/models`` says vLLM): a 5xx fails ``.load()``, except, with ``auto``, a router's
    aggregate (vllm-router's 503 that names unhealthy workers: completions go to the
    others), which is a WARN."""
    url = f"{endpoint.url}{health}"
    answer = http_get(url, headers, secrets, limit=limit)
    refused = _refused(url, answer, key, secrets)
    if refused is not None:
        raise refused
    if answer.status_code < 500:
        return
    shown = redact(url, secrets)
    if auto and _ROUTER_AGGREGATE in answer.text[:2000]:
        logger.warning(
            "%s answered HTTP %d: %s. A router's aggregate (vllm-router's): some workers "
            "behind it are down; going on, as its completions go to the others. Set option "
            "'healthPath' to '/health' to fail .load() instead.",
            shown,
            answer.status_code,
            _shown(answer, secrets),
        )
        return
    option = (
        "option 'healthPath' auto: the server says it is vLLM"
        if auto
        else (f"option 'healthPath'={health!r}")
    )
    raise ServerError(
        f"The model server at {shown} ({option}) answered HTTP {answer.status_code}: "
        f"{_shown(answer, secrets)}. Its engine may not be running (restart it; see its "
        f"log), or this is a gateway whose {health} is not a liveness check: LiteLLM's "
        "/health sends a completion to every model behind it (and answers 500 without a "
        "key), vllm-router's answers 503 while any one of its workers is down. Behind a "
        "gateway, set option 'healthPath' to '' (/v1/models is checked either way) or to its "
        "liveness path (LiteLLM: '/health/liveliness'); else point option 'endpoint' at a "
        "healthy server."
    )


#: What an answer about a missing or refused key says (LiteLLM answers a wrong key with 400
#: "No connected db", and its /health without a key with 500).
_ABOUT_KEY = re.compile(
    r"auth|api[ _-]?key|\bkey\b|bearer|unauthori[sz]ed|no connected db", re.IGNORECASE
)


def _refused(
    url: str, response: httpx.Response, key: Secret | None, secrets: list[Secret | None]
) -> ServerError | None:
    """The error that asks about the key, where ``response`` says the key is missing or
    refused: 401/403, or a 400/500 whose body speaks of auth, a key or LiteLLM's "No
    connected db"."""
    status = response.status_code
    if status not in (401, 403) and not (
        status in (400, 500) and _ABOUT_KEY.search(redact(response.text, secrets)[:2000])
    ):
        return None
    given = "the API key given was refused" if key is not None else "it needs an API key"
    return ServerError(
        f"The model server at {redact(url, secrets)} answered HTTP {status}"
        f"{'' if status in (401, 403) else ': ' + _shown(response, secrets)}: {given}. Set "
        "option 'apiKeyEnv' (the name of an environment variable holding the key) or "
        "'apiKey'."
    )


def _shown(response: httpx.Response, secrets: list[Secret | None]) -> str:
    """The start of an answer's body, credentials masked, for a message."""
    return repr(redact(response.text, secrets)[:200])


def check_priority(options: HttpOptions, model: str, priority: int | None) -> None:
    """Option ``priority``: one request of one token with it to each endpoint, so that a server
    without priority scheduling (vLLM answers 400 "Got priority N but Priority scheduling is
    not enabled.") fails ``.load()`` before any prompt is sent. Priority 0 (every request's
    default) needs no check."""
    if not priority:
        return
    key = options.key.resolve()
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
        "priority": priority,
    }
    endpoints = _all_endpoints(options)  # endpointsFile's replicas too
    down = [e for e in endpoints if _known_down(e)]
    if down:
        logger.info(
            "Option 'priority': not checked at %s, found unreachable just before.",
            _few([e.url for e in down]),
        )

    def probe(endpoint: Endpoint) -> httpx.Response:
        return http_get(
            f"{endpoint.url}/v1/chat/completions",
            {
                **options.request_headers.sent(),
                **auth_headers(key, endpoint),
                "content-type": "application/json",
            },
            [key, endpoint.credentials],
            option="endpoint",
            limit=options.max_response_bytes,
            timeout=CHECK_TIMEOUT_S * 6,  # a completion, not a listing: the model runs
            content=json.dumps(body).encode("utf-8"),
        )

    slow: list[str] = []
    for endpoint, outcome in each_endpoint([e for e in endpoints if e not in down], probe):
        url = f"{endpoint.url}/v1/chat/completions"
        secrets = [key, endpoint.credentials]
        if outcome is None:  # not checked within CHECK_TOTAL_S
            slow.append(redact(url, secrets))
            continue
        if isinstance(outcome, ServerError):
            if isinstance(outcome.__cause__, TimeoutError | httpx.TimeoutException):
                # A low priority waits behind the pool's interactive traffic: a slow answer
                # says nothing about the policy (a refusal is immediate).
                slow.append(redact(url, secrets))
                continue
            raise ServerError(f"Checking option 'priority'={priority}: {outcome}") from outcome
        text = redact(outcome.text, secrets)
        if outcome.status_code == 400 and "priority" in text.lower():
            raise ServerError(
                f"Option 'priority'={priority}: the model server at {endpoint.url} does not "
                f"schedule by priority (it answered HTTP 400: {text[:200]!r}). Start vLLM with "
                "--scheduling-policy priority, or drop option 'priority'."
            )
        if outcome.status_code >= 400:
            logger.warning(
                "Option 'priority': the check request to %s answered HTTP %d (%s); going on.",
                url,
                outcome.status_code,
                text[:200],
            )
    if slow:
        logger.warning(
            "Option 'priority': the check request to %s got no answer within %g s; going on.",
            _few(slow),
            CHECK_TIMEOUT_S * 6,
        )


def _length(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def http_get(
    url: str,
    headers: dict[str, str],
    secrets: list[Secret | None],
    *,
    option: str = "endpoint",
    limit: int | None = None,
    timeout: float | None = None,
    content: bytes | None = None,
) -> httpx.Response:
    """GET (POST of ``content`` where given) on the driver, its body read whole (decoded from
    its ``Content-Encoding``) within ``limit`` bytes (option ``maxResponseBytes``) and the
    whole request within ``timeout`` seconds. A server that cannot be reached, is too slow or
    answers too much is a :class:`ServerError` naming the URL (credentials masked), the cause,
    the bound and the option to fix."""
    shown = redact(url, secrets)
    timeout = CHECK_TIMEOUT_S if timeout is None else timeout
    result: list[httpx.Response | BaseException] = []

    def run() -> None:  # a thread of its own: the caller's thread may run an event loop
        try:
            result.append(asyncio.run(_get(url, headers, limit, timeout, content)))
        except BaseException as exc:  # handed to the caller's thread
            result.append(exc)

    thread = threading.Thread(target=run, name="dspark-json-check", daemon=True)
    thread.start()
    thread.join()
    outcome = result[0]
    if isinstance(outcome, httpx.Response):
        return outcome
    if isinstance(outcome, TimeoutError | httpx.TimeoutException):
        raise ServerError(
            f"The model server at {shown} did not answer within {timeout:g} s (connect and "
            f"read together, the bound of each check at .load()). Check that it is running and "
            f"not overloaded, and that option {option!r} points to it."
        ) from outcome
    if isinstance(outcome, BodyTooLarge):
        raise ServerError(
            f"The answer of {shown} is larger than maxResponseBytes={outcome.limit} bytes "
            f"{outcome.what}; the rest was not read. Check option {option!r} (a server or proxy "
            "that misbehaves), or raise option 'maxResponseBytes'."
        ) from outcome
    if isinstance(outcome, BodyRefused):
        raise ServerError(
            f"The answer of {shown} (HTTP {outcome.status}) is refused: "
            f"{redact(str(outcome), secrets)}. Check option {option!r} (a server or proxy that "
            "misbehaves)."
        ) from outcome
    if isinstance(outcome, httpx.HTTPError):
        reason = redact(str(outcome).split(" for url ", 1)[0], secrets)
        raise ServerError(
            f"Cannot reach the model server at {shown} ({type(outcome).__name__}: {reason}). "
            f"Check that it is running and that option {option!r} points to it."
        ) from outcome
    raise outcome


async def _get(
    url: str, headers: dict[str, str], limit: int | None, timeout: float, content: bytes | None
) -> httpx.Response:
    """One GET (POST of ``content``) through the transport the executors use (httpx's own
    through a proxy), the body read by :func:`read_body`; all of it within ``timeout``."""
    proxy = proxy_for(url)
    transport: httpx.AsyncBaseTransport = (
        StreamTransport(httpx.create_ssl_context(), max_body=limit)
        if proxy is None
        else httpx.AsyncHTTPTransport(proxy=proxy)
    )
    timeouts = dict.fromkeys(("connect", "read", "write", "pool"), timeout)
    request = httpx.Request(
        "GET" if content is None else "POST",
        url,
        headers=headers,
        content=content,
        extensions={"timeout": timeouts},
    )
    try:
        async with asyncio.timeout(timeout):
            response = await transport.handle_async_request(request)
            try:
                body = await read_body(response, request, limit)
            finally:
                await response.aclose()
    finally:
        await transport.aclose()
    fields = [(k, v) for k, v in response.headers.items() if k not in _FRAMING]
    return httpx.Response(response.status_code, headers=fields, content=body, request=request)


#: Headers that describe the body as sent, not the decoded one handed back.
_FRAMING = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def fetch_served_schema(options: HttpOptions, where: str) -> Mapping[str, Any]:
    """The JSON Schema at ``where`` (option ``schemaEndpoint``: a path on the first endpoint, or
    a URL)."""
    endpoint = options.endpoints[0]
    url = where if "://" in where else f"{endpoint.url}/{where.lstrip('/')}"
    key = options.key.resolve()
    secrets = [key, endpoint.credentials]
    response = http_get(
        url,
        {**options.request_headers.sent(), **auth_headers(key, endpoint)},
        secrets,
        option="schemaEndpoint",
        limit=options.max_response_bytes,
    )
    try:
        body = response.json() if response.status_code == 200 else None
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict):
        for wrapper in ("json_schema", "schema"):  # {"schema": {...}} or a response_format
            inner = body.get(wrapper)
            if isinstance(inner, dict):
                body = inner.get("schema", inner) if wrapper == "json_schema" else inner
        return body
    raise ServerError(
        f"{redact(url, secrets)} (option 'schemaEndpoint') answered HTTP "
        f"{response.status_code} without a JSON Schema object: "
        f"{redact(response.text, secrets)[:200]!r}. Give the schema with option "
        "'responseFormat' instead."
    )
