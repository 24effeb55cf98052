"""A lean HTTP/1.1 transport for httpx: asyncio streams, one keep-alive connection per origin.

httpx's default transport (httpcore + h11 + anyio) spends most of the client's CPU per request,
which on a small executor is the ceiling of the whole source (figures: benchmarks/README.md,
"Client"). Each of our workers sends one request at a time over one connection
per endpoint, which needs none of httpcore's pooling, so this transport does only that: write the
request, read the status line, headers and a ``content-length`` or chunked body. It raises
httpx's own exceptions (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``, ``WriteTimeout``,
``RemoteProtocolError``), so the retry logic cannot tell it from the default one. Proxies are not
spoken here: the client uses httpx's default transport when the environment sets one.

A body has a hard limit (option ``maxResponseBytes``), as received and once decoded: a body
longer than the limit is not read past it (:class:`BodyTooLarge`), and :func:`read_body`
decodes ``Content-Encoding`` gzip / deflate itself, a bounded piece at a time, so a small gzip
bomb from a misbehaving server or proxy stops at the limit instead of filling the memory.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import socket
import ssl
import threading
import time
import zlib
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import httpx

__all__ = [
    "MAX_HEADER_LINES",
    "MAX_HEAD_BYTES",
    "MAX_IDLE_CONNECTIONS",
    "MAX_PARKED",
    "PARKED_SECONDS",
    "BodyRefused",
    "BodyTooLarge",
    "HeadersTooLarge",
    "StreamTransport",
    "proxy_for",
    "read_body",
]


#: An idle connection's key: scheme, host, port and TLS server name (``sni_hostname``).
_Key = tuple[bytes, bytes, int, str | None]


def proxy_for(url: str) -> str | None:
    """The proxy the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY) sets for ``url``.

    Asked by every worker of every task (each makes its own connections): the answer is kept
    per scheme, host and the environment's proxy variables as they are now, so that a call
    reads only those (the standard library's :func:`~urllib.request.getproxies` and
    :func:`~urllib.request.proxy_bypass` decode the whole environment, twice, at each call:
    6.7 % of a task worker's CPU samples end to end, benchmarks/results/end_to_end_cpu.md)."""
    parts = urlsplit(url)
    key = (_proxy_settings(), parts.scheme, parts.hostname or "")
    if key in _PROXIES:
        return _PROXIES[key]
    proxy = None if proxy_bypass(key[2]) else getproxies().get(key[1])
    if len(_PROXIES) >= _PROXIES_KEPT:
        _PROXIES.clear()
    _PROXIES[key] = proxy
    return proxy


_SUFFIX = (b"_proxy", "_proxy")
_CGI_METHOD = (b"REQUEST_METHOD", "REQUEST_METHOD")
#: :func:`proxy_for`'s answers, by the environment's proxy settings, scheme and host.
_PROXIES: dict[tuple[tuple[tuple[Any, Any], ...], str, str], str | None] = {}
_PROXIES_KEPT = 1024


def _proxy_settings() -> tuple[tuple[Any, Any], ...]:
    """The environment's entries that decide a proxy (any ``*_proxy``, any case, and
    ``REQUEST_METHOD``, under which ``HTTP_PROXY`` is ignored), read undecoded: from the dict
    under ``os.environ`` where it is one (CPython), else ``os.environb`` where the platform has
    it. Whatever the environment holds (a Spark worker's: a hundred variables), this is a scan
    of one dict."""
    raw = getattr(os.environ, "_data", None)  # CPython's own dict under os.environ: C speed
    if isinstance(raw, dict):
        return tuple(
            (k, v) for k, v in raw.items() if k[-6:].lower() in _SUFFIX or k in _CGI_METHOD
        )
    if os.supports_bytes_environ:
        return tuple(
            (k, v)
            for k, v in os.environb.items()
            if k[-6:].lower() == b"_proxy" or k == b"REQUEST_METHOD"
        )
    return tuple(
        (k, v) for k, v in os.environ.items() if k[-6:].lower() == "_proxy" or k == "REQUEST_METHOD"
    )


_LINE_LIMIT = 1 << 20  # longest status/header/chunk-size line accepted
#: The most header lines, and bytes of status and header lines, a response may have (1xx
#: interim answers included): a server that sends endless header lines is refused there
#: (:class:`HeadersTooLarge`) instead of filling the memory until the request times out.
MAX_HEADER_LINES = 256
MAX_HEAD_BYTES = 64 << 10
#: The most idle keep-alive connections one transport (one worker of a task) keeps, whatever
#: the number of endpoints: past it, the one idle longest is closed. A task then holds at most
#: ``maxConcurrency`` x (1 + this) connections for its requests (2,000 replicas in one task
#: opened 2,010 at once, and past a 1,024 file limit replicas silently got nothing).
MAX_IDLE_CONNECTIONS = 8
#: Plain-HTTP connections a transport leaves idle when it closes (a task's partition done) are
#: parked for the next transports of this process, at most this many in all, each for at most
#: :data:`PARKED_SECONDS` (under uvicorn's 5 s keep-alive, vLLM's server): the next partition's
#: workers take them instead of connecting again (a fresh connection per worker per partition
#: was 30 % of a task's fixed cost end to end, benchmarks/results/end_to_end_cpu.md).
MAX_PARKED = 128
PARKED_SECONDS = 2.0
_NO_BODY = frozenset({204, 304})
#: Methods sent once more on a new connection when a kept one turns out closed by the server.
_SAFE_TO_REPEAT = frozenset({"GET", "HEAD", "OPTIONS"})
_PIECE = 1 << 16  # bytes read or decoded at a time
#: ``Content-Encoding`` -> the ``wbits`` of the zlib stream (gzip: header; deflate: either form).
_ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 32 + 15}

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class BodyRefused(httpx.RequestError):
    """A response body (of an answer with HTTP ``status``) that is not read: its
    ``Content-Encoding`` is not one read here, or its data is not valid for it."""

    def __init__(self, message: str, status: int, *, request: httpx.Request) -> None:
        super().__init__(message, request=request)
        self.status = status


class BodyTooLarge(BodyRefused):
    """A response body over the limit, as received or once decoded (``what`` says which)."""

    def __init__(self, status: int, limit: int, what: str, *, request: httpx.Request) -> None:
        message = f"the response body is larger than {limit} bytes {what}"
        super().__init__(message, status, request=request)
        self.limit = limit
        self.what = what


class HeadersTooLarge(BodyRefused):
    """A response whose head (status and header lines) passes :data:`MAX_HEADER_LINES` lines
    or :data:`MAX_HEAD_BYTES` bytes; the rest is not read."""

    def __init__(self, status: int, *, request: httpx.Request) -> None:
        message = (
            f"the response has more than {MAX_HEADER_LINES} header lines or "
            f"{MAX_HEAD_BYTES} bytes of them"
        )
        super().__init__(message, status, request=request)


class StreamTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1, one request at a time per origin, connections kept alive between requests;
    a body longer than ``max_body`` bytes is refused with :class:`BodyTooLarge` (the connection
    is closed, the rest of the body never read)."""

    def __init__(
        self, ssl_context: ssl.SSLContext | None = None, *, max_body: int | None = None
    ) -> None:
        self._ssl = ssl_context
        self._max_body = max_body
        self._idle: dict[_Key, Connection] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        # By TLS name too: an address two names resolved to (http.replicas) keeps one
        # connection per name, each verified for its own name.
        key = (url.raw_scheme, url.raw_host, port, request.extensions.get("sni_hostname"))
        connection = self._idle.pop(key, None)
        if connection is not None and (connection[0].at_eof() or connection[1].is_closing()):
            connection[1].close()  # the server closed it while it was idle
            connection = None
        reused = connection is not None
        if connection is None:
            connection, reused = await self._connect(request, key, timeouts.get("connect"))
        while True:
            try:
                status, headers, body, keep_alive = await self._exchange(
                    request, *connection, timeouts
                )
                break
            except BaseException as exc:
                connection[1].close()
                # A kept connection the server closed as it was taken (its close not seen
                # yet): a request safe to send twice goes once more, on a new connection. A
                # POST is not sent again here: the client's retries (maxAttempts) decide.
                stale = isinstance(exc, (httpx.RemoteProtocolError, httpx.NetworkError))
                if not (reused and stale and request.method in _SAFE_TO_REPEAT):
                    raise
            connection, reused = await self._connect(
                request, key, timeouts.get("connect"), parked=False
            )
        if keep_alive:
            self._keep(key, connection)
        else:
            connection[1].close()
        if any(name.lower() == b"content-encoding" for name, _ in headers):
            # A stream, not content: httpx would decode content (a gzip bomb included) right
            # here; :func:`read_body` decodes it within the limit.
            return httpx.Response(
                status, headers=headers, stream=httpx.ByteStream(body), request=request
            )
        return httpx.Response(status, headers=headers, content=body, request=request)

    def _keep(self, key: _Key, connection: Connection) -> None:
        """``connection`` idle for the next request to its origin: one per origin (another
        one there, of a request made at the same time, is closed), :data:`MAX_IDLE_CONNECTIONS`
        in all (the one idle longest closed)."""
        other = self._idle.pop(key, None)
        if other is not None:
            other[1].close()
        self._idle[key] = connection
        while len(self._idle) > MAX_IDLE_CONNECTIONS:
            self._idle.pop(next(iter(self._idle)))[1].close()

    async def _connect(
        self, request: httpx.Request, key: _Key, timeout: float | None, *, parked: bool = True
    ) -> tuple[Connection, bool]:
        """A connection to ``key``'s origin, and whether it is a parked one (it may have been
        closed by the server as it was taken, as a kept one may)."""
        host = key[1].decode("ascii")
        secure = key[0] == b"https"
        loop = asyncio.get_running_loop()
        reader = _SilenceReader(limit=_LINE_LIMIT, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        sock = _unpark(key) if parked and not secure else None
        if sock is not None:
            try:
                transport, _ = await loop.create_connection(lambda: protocol, sock=sock)
                return (reader, asyncio.StreamWriter(transport, protocol, reader, loop)), True
            except OSError:
                sock.close()  # connect as if none was parked
                reader = _SilenceReader(limit=_LINE_LIMIT, loop=loop)
                protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            async with asyncio.timeout(timeout):
                transport, _ = await loop.create_connection(
                    lambda: protocol,
                    host,
                    key[2],
                    ssl=(self._ssl or ssl.create_default_context()) if secure else None,
                    # An address a name resolved to (http.replicas): TLS checks the name.
                    server_hostname=request.extensions.get("sni_hostname", host)
                    if secure
                    else None,
                )
                return (reader, asyncio.StreamWriter(transport, protocol, reader, loop)), False
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("timed out connecting", request=request) from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc

    async def _exchange(
        self,
        request: httpx.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        timeouts: dict[str, float | None],
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        target = request.url.raw_path
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), target)]
        head += [b"%s: %s\r\n" % (name, value) for name, value in request.headers.raw]
        writer.write(b"".join(head) + b"\r\n" + request.content)
        try:
            async with asyncio.timeout(timeouts.get("write")):
                await writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("timed out sending the request", request=request) from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc), request=request) from exc
        silence = timeouts.get("read")
        try:
            async with asyncio.timeout(silence) as watch:
                if isinstance(reader, _SilenceReader):
                    reader.watch = (watch, silence) if silence is not None else None
                try:
                    return await _read_response(reader, request.method == "HEAD", self._max_body)
                finally:
                    if isinstance(reader, _SilenceReader):
                        reader.watch = None
        except _HeadOverrun as exc:
            raise HeadersTooLarge(exc.status, request=request) from exc
        except _Overrun as exc:
            raise BodyTooLarge(exc.status, exc.limit, "as received", request=request) from exc
        except TimeoutError as exc:
            raise httpx.ReadTimeout(
                f"the server sent nothing for {silence} s while answering", request=request
            ) from exc
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as exc:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body", request=request
            ) from exc
        except ValueError as exc:
            raise httpx.RemoteProtocolError(f"malformed response: {exc}", request=request) from exc

    async def aclose(self) -> None:
        """Close the transport: its idle plain-HTTP connections are parked for the next
        transports of this process (:func:`_park`), the others closed."""
        for key, (reader, writer) in self._idle.items():
            _park(key, reader, writer)
            writer.close()
        self._idle.clear()


#: Parked connections by origin: (socket, when parked, the process that parked it). A socket,
#: not an asyncio connection: a connection belongs to the event loop that made it, and each
#: partition's requests run in a loop of their own.
_PARKED: dict[_Key, list[tuple[socket.socket, float, int]]] = {}
_PARKED_LOCK = threading.Lock()


def _park(key: _Key, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep a duplicate of the socket under ``writer`` (plain HTTP, idle: nothing unread, not
    closed by the server) for :func:`_unpark`; the caller then closes ``writer``, which closes
    its own descriptor only (no shutdown: the duplicate keeps the connection open). Past
    :data:`MAX_PARKED`, the one parked longest is closed."""
    if key[0] != b"http" or reader.at_eof() or writer.is_closing():
        return
    if getattr(reader, "_buffer", b""):  # bytes the server sent past its answer: not idle
        return
    raw = writer.get_extra_info("socket")
    if raw is None:
        return
    try:
        sock = raw.dup()
    except OSError:
        return
    sock.setblocking(False)
    dropped: list[socket.socket] = []
    now = time.monotonic()
    with _PARKED_LOCK:
        for origin, waiting in list(_PARKED.items()):  # the expired ones go at once
            dropped += [entry[0] for entry in waiting if now - entry[1] >= PARKED_SECONDS]
            waiting[:] = [entry for entry in waiting if now - entry[1] < PARKED_SECONDS]
            if not waiting:
                del _PARKED[origin]
        _PARKED.setdefault(key, []).append((sock, now, os.getpid()))
        parked = sum(len(v) for v in _PARKED.values())
        while parked > MAX_PARKED:
            oldest = min(_PARKED, key=lambda k: _PARKED[k][0][1])
            dropped.append(_PARKED[oldest].pop(0)[0])
            if not _PARKED[oldest]:
                del _PARKED[oldest]
            parked -= 1
    for old in dropped:
        old.close()


@atexit.register
def _close_parked() -> None:
    with _PARKED_LOCK:
        for waiting in _PARKED.values():
            for entry in waiting:
                entry[0].close()
        _PARKED.clear()


def _unpark(key: _Key) -> socket.socket | None:
    """A connection to ``key``'s origin parked by this process less than
    :data:`PARKED_SECONDS` ago that the server has not closed (a peek sees neither its end nor
    stray bytes), or ``None``; the ones that fail are closed."""
    now = time.monotonic()
    while True:
        with _PARKED_LOCK:
            waiting = _PARKED.get(key)
            if not waiting:
                return None
            sock, parked, pid = waiting.pop()  # the most recent: the least likely closed
            if not waiting:
                del _PARKED[key]
        if pid == os.getpid() and now - parked < PARKED_SECONDS and _quiet(sock):
            return sock
        sock.close()  # a forked child's copy, too old, or closed by the server


def _quiet(sock: socket.socket) -> bool:
    """Whether a parked connection is open with nothing to read (a server that closed it has
    sent its end: the peek reads ``b""``)."""
    try:
        sock.recv(1, socket.MSG_PEEK)  # b"": closed; a byte: stray data; either way, not used
    except BlockingIOError:
        return True
    except OSError:
        pass
    return False


class _SilenceReader(asyncio.StreamReader):
    """A stream reader whose read timeout is a silence timeout: each piece of data received
    pushes the deadline of the read under way (``watch``: its timeout and the silence allowed)
    back, so a server that keeps sending is never cut by it, however slowly it sends."""

    watch: tuple[asyncio.Timeout, float] | None = None

    def feed_data(self, data: Any) -> None:  # bytes; typeshed says Iterable[SupportsIndex]
        super().feed_data(data)
        if self.watch is not None:
            timeout, silence = self.watch
            if not timeout.expired():
                timeout.reschedule(asyncio.get_running_loop().time() + silence)


class _Overrun(Exception):
    def __init__(self, status: int, limit: int) -> None:
        self.status = status
        self.limit = limit


class _HeadOverrun(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


async def _read_response(
    reader: asyncio.StreamReader, head_only: bool, limit: int | None = None
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    status_line = await reader.readuntil(b"\r\n")
    lines, head_bytes = 0, len(status_line)
    while True:
        version, _, rest = status_line.partition(b" ")
        if not version.startswith(b"HTTP/1."):
            raise ValueError(f"status line {status_line[:80]!r}")
        status = int(rest[:3])
        headers: list[tuple[bytes, bytes]] = []
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            lines += 1
            head_bytes += len(line)
            if lines > MAX_HEADER_LINES or head_bytes > MAX_HEAD_BYTES:
                raise _HeadOverrun(status)
            name, _, value = line.partition(b":")
            headers.append((name.strip(), value.strip()))
        if not 100 <= status < 200:
            break
        status_line = await reader.readuntil(b"\r\n")  # skip 1xx interim answers
        lines += 1
        head_bytes += len(status_line)
        if lines > MAX_HEADER_LINES or head_bytes > MAX_HEAD_BYTES:  # a flood of 1xx answers
            raise _HeadOverrun(status)
    fields = {name.lower(): value for name, value in headers}
    keep_alive = fields.get(b"connection", b"").lower() != b"close" and version != b"HTTP/1.0"
    if head_only or status in _NO_BODY:
        return status, headers, b"", keep_alive
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        return status, headers, await _read_chunked(reader, status, limit), keep_alive
    if b"content-length" in fields:
        length = int(fields[b"content-length"])
        if limit is not None and length > limit:
            raise _Overrun(status, limit)
        return status, headers, await reader.readexactly(length), keep_alive
    # Delimited by the server closing.
    if limit is None:
        return status, headers, await reader.read(), False
    parts: list[bytes] = []
    size = 0
    while piece := await reader.read(_PIECE):
        size += len(piece)
        if size > limit:
            raise _Overrun(status, limit)
        parts.append(piece)
    return status, headers, b"".join(parts), False


async def _read_chunked(reader: asyncio.StreamReader, status: int, limit: int | None) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers
            return b"".join(parts)
        total += size
        if limit is not None and total > limit:
            raise _Overrun(status, limit)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def read_body(response: httpx.Response, request: httpx.Request, limit: int | None) -> bytes:
    """The body of ``response`` (to ``request``), decoded from its ``Content-Encoding``, with
    every byte count held to ``limit``: :class:`BodyTooLarge` as soon as the received or the
    decoded bytes pass it. An encoding other than gzip / deflate / identity, or data not valid
    for it, is a :class:`BodyRefused` (the client asks for none: it sends no
    ``Accept-Encoding``)."""
    if response.is_stream_consumed:  # built from bytes (MockTransport): httpx decoded them
        if limit is not None and len(response.content) > limit:
            what = "once decompressed" if "content-encoding" in response.headers else "as received"
            raise BodyTooLarge(response.status_code, limit, what, request=request)
        return response.content
    received: list[bytes] = []
    size = 0
    async for piece in response.aiter_raw():
        size += len(piece)
        if limit is not None and size > limit:
            raise BodyTooLarge(response.status_code, limit, "as received", request=request)
        received.append(piece)
    body = b"".join(received)
    if not body:  # an empty answer (a 204, an empty /health) holds nothing to decode
        return body
    codings = [c.strip().lower() for c in response.headers.get("content-encoding", "").split(",")]
    for coding in reversed([c for c in codings if c not in ("", "identity")]):
        wbits = _ENCODINGS.get(coding)
        if wbits is None:
            raise BodyRefused(
                f"the response has Content-Encoding {coding!r}, which is not decoded here "
                "(the request asks for no encoding; gzip and deflate are read)",
                response.status_code,
                request=request,
            )
        body = _inflate(
            body, coding, wbits, limit=limit, status=response.status_code, request=request
        )
    return body


def _inflate(
    data: bytes, coding: str, wbits: int, *, limit: int | None, status: int, request: httpx.Request
) -> bytes:
    """``data`` decompressed, at most ``limit`` bytes of output ever held."""
    inflater = zlib.decompressobj(wbits)
    out: list[bytes] = []
    size = 0
    pending = data
    try:
        while not inflater.eof:
            piece = inflater.decompress(pending, _PIECE)
            pending = inflater.unconsumed_tail
            if not piece and not pending:
                break
            size += len(piece)
            if limit is not None and size > limit:
                raise BodyTooLarge(status, limit, "once decompressed", request=request)
            out.append(piece)
        if not inflater.eof:
            # Cut short: a gzip stream without its trailer (CRC-32 and length) or a zlib one
            # without its Adler-32 is not known to be whole; zlib checks them when present.
            raise zlib.error("the stream ends before its end: its trailer is missing")
    except zlib.error as exc:
        raise BodyRefused(
            f"the response body is not valid {coding} data ({exc})",
            status,
            request=request,
        ) from exc
    return b"".join(out)
