"""Requests per second through dspark-json's HTTP client against the local simulator.

    .venv/bin/python benchmarks/client_throughput.py [--requests 2000]

Side by side in one run, on the same simulator process: our client at several in-flight limits,
and a bare asyncio HTTP/1.1 client (the ceiling of the server on this machine). The simulator
answers at once, so this measures the client's own cost per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from importlib import resources
from urllib.parse import urlsplit

from dspark_json.client import ClientConfig, complete_all
from dspark_json.local import SimulatorProcess


def _requests(n: int) -> list[dict]:
    schema = json.loads(
        resources.files("dspark_json").joinpath("examples/review_schema.json").read_text()
    )
    rf = {"type": "json_schema", "json_schema": {"name": "review", "schema": schema}}
    return [
        {
            "model": "dspark-sim",
            "messages": [{"role": "user", "content": f"p{i}"}],
            "response_format": rf,
        }
        for i in range(n)
    ]


async def _bare(url: str, bodies: list[bytes], connections: int) -> None:
    parts = urlsplit(url)
    chunks = [bodies[k::connections] for k in range(connections)]

    async def one(chunk: list[bytes]) -> None:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        for body in chunk:
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\n"
                b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
        writer.close()

    await asyncio.gather(*(one(c) for c in chunks))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    requests = _requests(args.requests)
    rows = []
    with SimulatorProcess() as server:
        complete_all(requests[:50], ClientConfig(server.url))  # warm-up: imports, first sockets
        for limit in (1, 8, 32, 64):
            started = time.perf_counter()
            out = complete_all(requests, ClientConfig(server.url, max_concurrency=limit))
            elapsed = time.perf_counter() - started
            assert all(o.error is None for o in out)
            rows.append((f"dspark-json client, maxConcurrency={limit}", args.requests / elapsed))
        bodies = [json.dumps(r).encode() for r in requests]
        started = time.perf_counter()
        asyncio.run(_bare(server.url, bodies, 32))
        rows.append(
            (
                "bare asyncio client, 32 connections (server ceiling)",
                args.requests / (time.perf_counter() - started),
            )
        )
    print(f"| client ({args.requests} requests, simulator latency 0) | requests/s |")
    print("|---|---:|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
