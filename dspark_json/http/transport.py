"""A lean HTTP/1.1 transport for httpx: asyncio streams, one keep-alive connection per origin.

httpx's default transport (httpcore + h11 + anyio) spends most of the client's CPU per request,
which on a small executor is the ceiling of the whole source (figures: benchmarks/README.md,
"Client"). Each of our workers sends one request at a time over one connection
per endpoint, which needs none of httpcore's pooling, so this transport does only that: write the
request, read the status line, headers and a ``content-length`` or chunked body. It raises
httpx's own exceptions (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``, ``WriteTimeout``,
``RemoteProtocolError``), so the retry logic cannot tell it from the default one. Proxies are not
spoken here: the client uses httpx's default transport when the environment sets one.
"""

from __future__ import annotations

import asyncio
import ssl

import httpx

__all__ = ["StreamTransport"]

_LINE_LIMIT = 1 << 20  # longest status/header/chunk-size line accepted
_NO_BODY = frozenset({204, 304})

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class StreamTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1, one request at a time per origin, connections kept alive between requests."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl = ssl_context
        self._idle: dict[tuple[bytes, bytes, int], Connection] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        url = request.url
        key = (url.raw_scheme, url.raw_host, url.port or (443 if url.scheme == "https" else 80))
        connection = self._idle.pop(key, None)
        if connection is not None and (connection[0].at_eof() or connection[1].is_closing()):
            connection[1].close()  # the server closed it while it was idle
            connection = None
        if connection is None:
            connection = await self._connect(request, key, timeouts.get("connect"))
        reader, writer = connection
        try:
            status, headers, body, keep_alive = await self._exchange(
                request, reader, writer, timeouts
            )
        except BaseException:
            writer.close()
            raise
        if keep_alive:
            self._idle[key] = connection
        else:
            writer.close()
        return httpx.Response(status, headers=headers, content=body, request=request)

    async def _connect(
        self, request: httpx.Request, key: tuple[bytes, bytes, int], timeout: float | None
    ) -> Connection:
        host = key[1].decode("ascii")
        secure = key[0] == b"https"
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.open_connection(
                    host,
                    key[2],
                    ssl=(self._ssl or ssl.create_default_context()) if secure else None,
                    server_hostname=host if secure else None,
                    limit=_LINE_LIMIT,
                )
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
        try:
            async with asyncio.timeout(timeouts.get("read")):
                return await _read_response(reader, request.method == "HEAD")
        except TimeoutError as exc:
            raise httpx.ReadTimeout("timed out reading the response", request=request) from exc
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as exc:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body", request=request
            ) from exc
        except ValueError as exc:
            raise httpx.RemoteProtocolError(f"malformed response: {exc}", request=request) from exc

    async def aclose(self) -> None:
        for _, writer in self._idle.values():
            writer.close()
        self._idle.clear()


async def _read_response(
    reader: asyncio.StreamReader, head_only: bool
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    status_line = await reader.readuntil(b"\r\n")
    while True:
        version, _, rest = status_line.partition(b" ")
        if not version.startswith(b"HTTP/1."):
            raise ValueError(f"status line {status_line[:80]!r}")
        status = int(rest[:3])
        headers: list[tuple[bytes, bytes]] = []
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.partition(b":")
            headers.append((name.strip(), value.strip()))
        if not 100 <= status < 200:
            break
        status_line = await reader.readuntil(b"\r\n")  # skip 1xx interim answers
    fields = {name.lower(): value for name, value in headers}
    keep_alive = fields.get(b"connection", b"").lower() != b"close" and version != b"HTTP/1.0"
    if head_only or status in _NO_BODY:
        return status, headers, b"", keep_alive
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        return status, headers, await _read_chunked(reader), keep_alive
    if b"content-length" in fields:
        return status, headers, await reader.readexactly(int(fields[b"content-length"])), keep_alive
    return status, headers, await reader.read(), False  # delimited by the server closing


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
