"""Which endpoints exist now, and which models each serves: replicas that come and go, and
several models in one stream.

The endpoints of a task's client are those of option ``endpoint``, each host name standing for
every address it resolves to where it resolves to several (or option ``resolveEndpoints``: a
Kubernetes headless service has one address per ready replica), plus the base URLs of option
``endpointsFile`` (one per line). :class:`Replicas` looks again every
``endpointRefreshSeconds`` from inside the running task (the file read again, the names
resolved again) and fetches each endpoint's ``/v1/models``; a request goes only to an endpoint
that lists its model (the request body's ``model``: :func:`request_model`). A replica that
answers 404 for a model (:func:`model_not_found`) is asked for its list again at once.

An endpoint's list is known once its ``/v1/models`` answered one; until then an endpoint of
option ``endpoint`` takes any model (a gateway without ``/v1/models`` too: today's behaviour),
and a replica of the file or of a name's addresses takes none (a replica that is still loading
its model gets no request; a 5xx or 429 from ``/v1/models`` is no answer). A prompt whose
model no endpoint serves waits, with a WARN every :data:`~dspark_json.http.endpoints.WAIT_WARN_S`
s, until ``requestDeadline``; its row then gets ``_error.type = model_unavailable``, and no
request is sent for it.

Routing by model is on where it can matter: option ``endpointsFile``, a name that stands for
several addresses (or ``resolveEndpoints``), requests that name more than one model, or a 404
for a model. Otherwise (one model, fixed endpoints) nothing is fetched and requests go as they
always did.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from urllib.parse import urlsplit, urlunsplit

from dspark_json.errors import OptionError
from dspark_json.fs import NotRegular, TooLarge, read_regular, resolve
from dspark_json.http.endpoints import WAIT_WARN_S, Endpoint
from dspark_json.http.options import HttpOptions, _check_base_url
from dspark_json.http.secrets import redact, split_credentials
from dspark_json.http.transport import proxy_for
from dspark_json.rows import load_json
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

__all__ = [
    "Replicas",
    "expand",
    "model_not_found",
    "parse_models",
    "read_endpoints_file",
    "request_model",
]

logger = logging.getLogger("dspark_json")

#: Seconds a task waits for a name to resolve or for a ``/v1/models`` answer.
LOOKUP_TIMEOUT_S = 5.0
#: ``/v1/models`` lookups a task makes at once (connections), whatever the number of replicas.
MAX_LOOKUPS_AT_ONCE = 32
#: Seconds one look at the replicas' ``/v1/models`` may take in all: those not answered by
#: then count as not answering (until the next look), so that thousands of replicas that do
#: not answer hold neither the task's start nor a refresh for long.
REFRESH_BOUND_S = 30.0

#: The largest endpoints file read (option ``endpointsFile``), as stored and decompressed.
MAX_ENDPOINTS_FILE_BYTES = 1024 * 1024
#: The most endpoints an endpoints file may list.
MAX_ENDPOINTS = 10_000

#: Seconds after which an endpoints file that read empty, where it listed replicas before, is
#: read again before the pool is taken as scaled to zero.
EMPTY_CONFIRM_S = 1.0

#: A comment in an endpoints file: ``#`` at the start of a line or after white space.
_COMMENT = re.compile(r"(?:^|\s)#")

_MODEL = re.compile(rb'"model": *("(?:[^"\\]|\\.)*")')

#: ``get(endpoint, path)``: the status and body of a GET (raises on a transport error).
Getter = Callable[[Endpoint, str], Awaitable[tuple[int, bytes]]]
#: ``admit(endpoint, models)``: whether a replica that appeared (of option endpointsFile, or
#: an address a name resolved to) may get requests (option priority: it schedules by it).
Admit = Callable[[Endpoint, frozenset[str] | None], Awaitable[bool]]


def read_endpoints_file(
    source: str,
    option: str = "endpointsFile",
    *,
    storage: StorageSettings = ENVIRONMENT_ONLY,
    allow_empty: bool = False,
) -> tuple[Endpoint, ...]:
    """The base URLs of an endpoints file: one per line, comments (``#`` at the start of a line
    or after a space: a ``#`` inside a URL's password stays part of it) and blank lines
    ignored. Raises :class:`OptionError` naming the option, the file (its credentials masked)
    and the fix; also where it lists none, unless ``allow_empty`` (a pool scaled to zero)."""
    shown = redact(source)
    try:
        fs, path = resolve(source, storage)
        data = read_regular(fs, path, MAX_ENDPOINTS_FILE_BYTES, decompress=True)
        text = data.decode("utf-8-sig")  # a byte order mark (an editor's) is no URL
    except TooLarge as exc:
        raise OptionError(
            f"Option {option!r} names {shown}, which is {exc.reason} (the limit of an "
            f"endpoints file, as stored and decompressed; {MAX_ENDPOINTS} endpoints at most). "
            "List one base URL per line, or point option 'endpoint' at a load balancer."
        ) from None
    except NotRegular as exc:
        raise OptionError(
            f"Option {option!r} names {shown}, which is {exc.reason}: never opened. Point it to a "
            "regular file (one base URL per line, e.g. http://10.0.0.7:8000)."
        ) from None
    except UnicodeDecodeError as exc:
        raise OptionError(
            f"Option {option!r} names {shown}, which is not UTF-8 text (byte {exc.start}). "
            "Write one base URL per line, e.g. http://10.0.0.7:8000."
        ) from None
    except Exception as exc:  # OSError, or an object store's own errors
        raise OptionError(
            f"Option {option!r} names {shown}, which cannot be read ({redact(str(exc))}). "
            "Create the file (one base URL per line, e.g. http://10.0.0.7:8000) or fix the "
            "option."
        ) from None
    out = []
    # Lines end at \n only (str.splitlines also splits at \x85, \u2028...: the line numbers
    # said would not be the editor's, and a control character would pass unseen).
    for number, line in enumerate(text.split("\n"), 1):
        item = _COMMENT.split(line.removesuffix("\r"), maxsplit=1)[0].strip()
        if not item:
            continue
        try:
            url, credentials = split_credentials(item.rstrip("/"))
        except ValueError:  # urlsplit's "Invalid IPv6 URL"
            url, credentials = item, None
        problem = _url_problem(url)
        if problem is not None:
            raise OptionError(
                f"Option {option!r}: line {number} of {shown} is not a base URL: "
                f"{_masked(item)!r} has {problem}. Write one http(s) base URL per line, e.g. "
                "'http://10.0.0.7:8000' (# starts a comment)."
            )
        parts = urlsplit(url)
        if parts.query or parts.fragment:
            raise OptionError(
                f"Option {option!r}: line {number} of {shown} is not a base URL: "
                f"{_masked(item)!r} has a query string or fragment (not shown). A base URL has "
                "none; a # or ? in a password must be percent-encoded (%23, %3F), and a key "
                "goes in option apiKeyEnv."
            )
        if parts.scheme not in ("http", "https") or not parts.hostname or " " in item:
            raise OptionError(
                f"Option {option!r}: line {number} of {shown} is not a base URL: "
                f"{_masked(item)!r}. Write one http(s) base URL per line, e.g. "
                "'http://10.0.0.7:8000' (# starts a comment)."
            )
        out.append(Endpoint(_check_base_url(option, url), credentials))
        if len(out) > MAX_ENDPOINTS:
            raise OptionError(
                f"Option {option!r}: {shown} lists more than {MAX_ENDPOINTS} endpoints (line "
                f"{number}), the limit of an endpoints file. Point option 'endpoint' at a load "
                "balancer in front of them, or split the replicas between queries."
            )
    if not out and not allow_empty:
        raise OptionError(
            f"Option {option!r} names {shown}, which lists no endpoint. Write one base URL "
            "per line (e.g. http://10.0.0.7:8000), or leave the option out."
        )
    return tuple(dict.fromkeys(out))


def _url_problem(url: str) -> str | None:
    """What makes ``url`` (credentials taken out) no URL to send to, ``None`` where nothing:
    a control character, a host name with characters no name has, a port that is not a
    number from 1 to 65535."""
    bad = next((c for c in url if ord(c) < 32 or 127 <= ord(c) < 160), None)
    if bad is not None:
        return f"a control character ({bad!r})"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "Port out of range 0-65535", "Invalid IPv6 URL"...
        if "IPv6" in str(exc):
            return "an IPv6 address that is not closed by ']'"
        return "a port that is not a number from 1 to 65535"
    if port == 0:
        return "a port that is not a number from 1 to 65535"
    host = parts.hostname or ""
    named = not host.startswith("[") and ":" not in host  # not an IPv6 address
    if named and not all(c.isalnum() or c in ".-_" for c in host):
        return "a host name with characters no host name has (letters, digits, '.', '-')"
    return None


def _masked(item: str) -> str:
    """An endpoints-file line for a message: everything up to its last ``@`` masked (a password
    with a raw ``#`` or ``?`` is not one to ``urlsplit``), the query string dropped."""
    scheme, sep, rest = item.partition("://")
    if not sep:
        scheme, rest = "", item
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    rest = rest.split("?", 1)[0].split("#", 1)[0]
    return redact(f"{scheme}{sep}{rest}")


def _is_name(host: str) -> bool:
    """Whether ``host`` is a name worth resolving (not an address, not localhost)."""
    if host == "localhost" or host.endswith(".localhost"):
        return False
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return True
    return False


def expand(endpoint: Endpoint, addresses: Sequence[str]) -> tuple[Endpoint, ...]:
    """``endpoint`` as one endpoint per address its host name resolved to, each keeping the
    name (with its port) as ``host``."""
    parts = urlsplit(endpoint.url)
    port = f":{parts.port}" if parts.port is not None else ""
    name = f"{parts.hostname}{port}"
    out = []
    for address in addresses:
        shown = f"[{address}]" if ":" in address else address
        url = urlunsplit(parts._replace(netloc=f"{shown}{port}"))
        out.append(Endpoint(url, endpoint.credentials, host=name))
    return tuple(out)


async def _addresses(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, of one family: the one the system lists first (a
    dual-stack server has an IPv4 and an IPv6 address, and is one replica, not two)."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(LOOKUP_TIMEOUT_S):
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family = infos[0][0] if infos else None
    return sorted({str(info[4][0]) for info in infos if info[0] == family})


def request_model(payload: bytes) -> str | None:
    """The ``model`` a request body asks (``None`` where it names none): read without parsing
    the body where ``"model":`` occurs once (the request builder's bodies), else parsed."""
    found = _MODEL.findall(payload)
    if len(found) == 1 and payload.count(b'"model"') == 1:
        value = json.loads(found[0])
        return value if isinstance(value, str) else None
    try:
        body = load_json(payload)
    except ValueError:
        return None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


def model_not_found(status: int, body: bytes) -> bool:
    """Whether an answer says the server does not serve the request's model: a 404 naming
    the model (vLLM: "The model `x` does not exist."; OpenAI: code model_not_found)."""
    if status != 404:
        return False
    text = body[:4096].decode("utf-8", errors="replace").lower()
    return "model" in text


def parse_models(status: int, body: bytes) -> frozenset[str] | None:
    """The model ids of a ``/v1/models`` answer; ``None`` where it is no model list (a gateway
    without the route)."""
    if status != 200:
        return None
    try:
        return frozenset(str(item["id"]) for item in load_json(body)["data"])
    except (ValueError, KeyError, TypeError):
        return None


class Replicas:
    """One task's view of the pool: the endpoints now and the models each serves, refreshed in
    the background while the task runs.

    ``on_change(endpoints)`` is called when the set of endpoints changes (the client's
    :class:`~dspark_json.http.endpoints.EndpointPool` then takes it)."""

    def __init__(
        self,
        config: HttpOptions,
        get: Getter,
        on_change: Callable[[tuple[Endpoint, ...]], None],
        admit: Admit | None = None,
    ) -> None:
        self.config = config
        self._get = get
        self._admit = admit
        self._admitted: set[Endpoint] = set()  # the replicas ``admit`` let in
        self._on_change = on_change
        self.endpoints: tuple[Endpoint, ...] = config.endpoints
        self.active = False
        self._dynamic_names: set[Endpoint] = set()  # option endpoint's names to resolve again
        self._served: dict[Endpoint, frozenset[str] | None] = {}
        self._known: set[Endpoint] = set()  # the endpoints whose list came from /v1/models
        self._changed = asyncio.Event()
        #: Set (and replaced) at each change in the endpoints or their models: a request that
        #: waits for its place at an endpoint looks whether it still may go there.
        self.moved = asyncio.Event()
        self._waiting: Counter[str] = Counter()  # model -> prompts waiting for a server
        self._waiting_since: dict[str, float] = {}
        self._loop: asyncio.Task[None] | None = None
        self._nag: asyncio.Task[None] | None = None
        self._asked: dict[Endpoint, asyncio.Task[None]] = {}

    async def start(self, models: Iterable[str | None]) -> None:
        """Discover the endpoints; turn routing by model on where it can matter (see the
        module's docstring), fetching each endpoint's models."""
        config = self.config
        names = [e for e in config.endpoints if _named(e) and not _proxied(e)]
        if config.resolve_endpoints:
            self._dynamic_names.update(names)
            for endpoint in (e for e in config.endpoints if e not in names and _named(e)):
                logger.info(
                    "resolveEndpoints: %s is reached through a proxy, which resolves its name; "
                    "sending to the name.",
                    endpoint.url,
                )
        elif names:
            for endpoint in names:  # a name that stands for several addresses
                if len(await self._resolve(endpoint)) > 1:
                    self._dynamic_names.add(endpoint)
        distinct = {m for m in models if m is not None}
        if config.endpoints_file is None and not self._dynamic_names and len(distinct) < 2:
            return
        await self.activate()

    async def activate(self) -> None:
        """Route by model from now on: find the endpoints, fetch their lists, refresh them."""
        if self.active:
            return
        self.active = True
        await self.refresh()
        self._loop = asyncio.create_task(self._refresh_loop())

    def allows(self, model: str | None) -> Callable[[Endpoint], bool] | None:
        """Which endpoints a request for ``model`` may go to (``None``: any)."""
        if not self.active or model is None:
            return None
        served = self._served

        def serves(endpoint: Endpoint) -> bool:
            models = served.get(endpoint)
            return models is None or model in models

        return serves

    def describe(self, model: str) -> str:
        """What each endpoint serves, for a message about ``model``."""
        parts = []
        for endpoint in self.endpoints:
            models = self._served.get(endpoint)
            listed = "not answering /v1/models" if models is None else ", ".join(sorted(models))
            parts.append(f"{endpoint.url}: {listed or 'nothing'}")
        return "; ".join(parts) or "no endpoint"

    async def wait_for(self, model: str, timeout: float) -> None:
        """Wait up to ``timeout`` s for a change in the endpoints or their models (the caller
        then looks again), counted as a prompt waiting for ``model`` (for the WARNs)."""
        if timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        self._waiting[model] += 1
        self._waiting_since.setdefault(model, loop.time())
        if self._nag is None or self._nag.done():
            self._nag = asyncio.create_task(self._warn_while_waiting())
        try:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self._waiting[model] -= 1
            if not self._waiting[model]:
                del self._waiting[model]
                self._waiting_since.pop(model, None)

    def not_serving(self, endpoint: Endpoint, model: str) -> None:
        """``endpoint`` answered 404 for ``model``: no request for it goes there until its
        ``/v1/models`` lists it again (asked at once)."""
        served = self._served.get(endpoint)
        self._served[endpoint] = (served or frozenset()) - {model}
        self._signal()
        if endpoint not in self._asked or self._asked[endpoint].done():
            self._asked[endpoint] = asyncio.create_task(self._fetch(endpoint))

    async def refresh(self) -> None:
        """Look again: the file, the names, each endpoint's ``/v1/models``."""
        endpoints = await self._discover()
        try:
            async with asyncio.timeout(REFRESH_BOUND_S):
                await _bounded(MAX_LOOKUPS_AT_ONCE, self._fetch, endpoints)
        except TimeoutError:
            unknown = [e for e in endpoints if e not in self._served]
            logger.warning(
                "%d of %d endpoints did not list their models within %gs (%d asked at once); "
                "they count as not answering /v1/models until the next look.",
                len(unknown),
                len(endpoints),
                REFRESH_BOUND_S,
                MAX_LOOKUPS_AT_ONCE,
            )
            for endpoint in unknown:  # as _fetch does for one that fails
                self._served[endpoint] = None if endpoint in self.config.endpoints else frozenset()
        if endpoints != self.endpoints:
            added = [e.url for e in endpoints if e not in self.endpoints]
            removed = [e.url for e in self.endpoints if e not in endpoints]
            logger.info(
                "Endpoints changed: %s added, %s removed.",
                ", ".join(added) or "none",
                ", ".join(removed) or "none",
            )
            if not endpoints:
                logger.warning(
                    "No endpoint is left (option endpointsFile lists none: a pool scaled to "
                    "zero?); sending pauses, and each prompt waits for one until "
                    "requestDeadline=%gs (its row then gets _error endpoint_unavailable).",
                    self.config.request_deadline,
                )
            self.endpoints = endpoints
            for gone in [e for e in self._served if e not in endpoints]:
                del self._served[gone]
                self._known.discard(gone)
            self._on_change(endpoints)
        self._signal()

    def _signal(self) -> None:
        self._changed.set()
        self.moved.set()
        self.moved = asyncio.Event()

    async def _discover(self) -> tuple[Endpoint, ...]:
        config = self.config
        out: list[Endpoint] = []
        for endpoint in config.endpoints:
            if endpoint in self._dynamic_names:
                resolved = await self._resolve(endpoint)
                before = [e for e in self.endpoints if e.host == _host(endpoint)]
                out += resolved or before or [endpoint]  # never resolved: the name, as given
            else:
                out.append(endpoint)
        source = config.endpoints_file
        if source is not None:
            try:
                out += await self._read_file(source)
            except OptionError as exc:  # half written, or gone for a moment: keep the last
                logger.warning("%s Keeping the endpoints read before.", exc)
                out += [e for e in self.endpoints if e not in out and e not in config.endpoints]
        return tuple(dict.fromkeys(out))

    async def _read_file(self, source: str) -> tuple[Endpoint, ...]:
        """Option ``endpointsFile``'s endpoints. Empty is a pool scaled to zero (sending pauses,
        prompts wait), once it reads empty again :data:`EMPTY_CONFIRM_S` later: a file being
        rewritten in place is empty for a moment."""

        def read() -> tuple[Endpoint, ...]:
            return read_endpoints_file(source, storage=self.config.storage, allow_empty=True)

        listed = await asyncio.to_thread(read)
        if listed or not any(e not in self.config.endpoints for e in self.endpoints):
            return listed
        await asyncio.sleep(EMPTY_CONFIRM_S)
        return await asyncio.to_thread(read)

    async def _resolve(self, endpoint: Endpoint) -> list[Endpoint]:
        parts = urlsplit(endpoint.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = await _addresses(parts.hostname or "", port)
        except (OSError, TimeoutError) as exc:
            logger.warning(
                "Cannot resolve %s (%s); keeping what it resolved to before (else the name).",
                parts.hostname,
                exc,
            )
            return []
        return list(expand(endpoint, addresses))

    async def _fetch(self, endpoint: Endpoint) -> None:
        """``endpoint``'s models from its ``/v1/models``."""
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                status, body = await self._get(endpoint, "/v1/models")
            if status == 429 or status >= 500:  # not ready (loading, restarting): no answer
                raise ConnectionError(f"HTTP {status}")
        except Exception as exc:  # any failure: keep what was known
            logger.debug("GET %s/v1/models failed: %s", endpoint.url, type(exc).__name__)
            if endpoint not in self._served:
                given = endpoint in self.config.endpoints  # option endpoint: as today
                self._served[endpoint] = None if given else frozenset()
            return
        models = parse_models(status, body)
        if models is None and status in (401, 403):
            models = self._served.get(endpoint)  # no key here: the requests will say so
        if not await self._admitted_now(endpoint, models):
            models = frozenset()  # no request goes there; asked again at the next look
        self._served[endpoint] = models
        if models is not None:
            self._known.add(endpoint)
        self._signal()

    async def _admitted_now(self, endpoint: Endpoint, models: frozenset[str] | None) -> bool:
        """Whether a replica (not one of option endpoint, which ``.load()`` checked) passes
        ``admit`` before its first request; once it did, it is not asked again."""
        if (
            self._admit is None
            or endpoint in self.config.endpoints
            or endpoint in self._admitted
            or models == frozenset()
        ):
            return True
        if not await self._admit(endpoint, models):
            return False
        self._admitted.add(endpoint)
        return True

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.endpoint_refresh_seconds)
            try:
                await self.refresh()
            except Exception:  # a failed look must not stop the task
                logger.exception("Looking at the endpoints again failed; trying again later.")

    async def _warn_while_waiting(self) -> None:
        """A WARN every :data:`WAIT_WARN_S` s while prompts wait for a model nobody serves."""
        loop = asyncio.get_running_loop()
        while self._waiting:
            await asyncio.sleep(WAIT_WARN_S)
            now = loop.time()
            for model, count in list(self._waiting.items()):
                logger.warning(
                    "No endpoint serves model %r (%s; looked at again every %gs). %d prompt(s) "
                    "of this task wait for it (the longest for %.0fs); a prompt gives up after "
                    "requestDeadline=%gs (its row then gets _error model_unavailable, no request "
                    "sent).",
                    model,
                    self.describe(model),
                    self.config.endpoint_refresh_seconds,
                    count,
                    now - self._waiting_since.get(model, now),
                    self.config.request_deadline,
                )

    async def close(self) -> None:
        tasks = [t for t in (self._loop, self._nag, *self._asked.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _bounded(
    at_once: int, step: Callable[[Endpoint], Awaitable[None]], endpoints: Sequence[Endpoint]
) -> None:
    """``step`` of each endpoint, at most ``at_once`` at a time."""
    gate = asyncio.Semaphore(at_once)

    async def one(endpoint: Endpoint) -> None:
        async with gate:
            await step(endpoint)

    await asyncio.gather(*(one(e) for e in endpoints))


def _named(endpoint: Endpoint) -> bool:
    """Whether ``endpoint``'s host is a name worth resolving."""
    return _is_name(urlsplit(endpoint.url).hostname or "")


def _proxied(endpoint: Endpoint) -> bool:
    """Whether requests to ``endpoint`` go through a proxy (HTTP(S)_PROXY): the proxy resolves
    its name, and the addresses this machine sees are not the ones to send to (a proxy that
    allows names only refuses a CONNECT to a bare address)."""
    return proxy_for(endpoint.url) is not None


def _host(endpoint: Endpoint) -> str:
    parts = urlsplit(endpoint.url)
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.hostname}{port}"
