"""What bounded request heads cost per request: uvicorn's httptools protocol with and without them.

    .venv/bin/python bench/listener_bench.py [--requests 20000] [--runs 3]

A trivial ASGI app (200, two bytes) is served by uvicorn on uvloop in a process of its own,
pinned to CPU 0, once with uvicorn's own `HttpToolsProtocol` and once with Pallas's
`BoundedHttpToolsProtocol` (`pallas_io.http_limits`), alternating, `--runs` times each.
One client on CPU 1 sends `--requests` sequential keep-alive requests shaped like an MCP
`tools/call` POST (its request line, 11 header fields, a 180-byte body) over one connection;
the server's CPU time (user + system, /proc) over those requests divided by their number is the
figure: the app is the same, so the difference is what the protocol adds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time

from agent_bench import cpu_seconds

BODY = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"send_message",' + (
    b'"arguments":{"message":"what is the weather in Lyon tomorrow, and should I take a coat?"}}}'
)
REQUEST = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept: application/json, text/event-stream\r\n"
    b"Content-Type: application/json\r\nMcp-Session-Id: 4b2b0b6c2f1e4d7c9a0e1f2a3b4c5d6e\r\n"
    b"Mcp-Protocol-Version: 2025-11-25\r\nUser-Agent: python-httpx/0.28.1\r\n"
    b"Accept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n"
    b"Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl\r\n"
    b"X-Request-Id: 1f2e3d4c\r\nContent-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
)

SERVER = """
import sys, uvicorn
from pallas_api.config import HttpLimits
from pallas_io.http_limits import bounded_protocol

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})

http = bounded_protocol(HttpLimits()) if sys.argv[2] == "bounded" else "httptools"
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), http=http, loop="uvloop", lifespan="off",
            log_level="warning", access_log=False)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def drive(port: int, requests: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(requests):
        writer.write(REQUEST)
        await reader.readuntil(b"ok")
    writer.close()


def measure(kind: str, requests: int) -> float:
    """Server CPU microseconds per request with protocol `kind`."""
    port = free_port()
    cmd = ["taskset", "-c", "0", sys.executable, "-c", SERVER, str(port), kind]
    server = subprocess.Popen(cmd)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        asyncio.run(drive(port, 500))  # warm up
        before = cpu_seconds(server.pid)
        asyncio.run(drive(port, requests))
        return (cpu_seconds(server.pid) - before) / requests * 1e6
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})
    figures: dict[str, list[float]] = {"httptools": [], "bounded": []}
    for _ in range(args.runs):
        for kind in figures:
            figures[kind].append(measure(kind, args.requests))
    for kind, values in figures.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"{kind:10} {statistics.median(values):6.1f} µs CPU per request (runs: {runs})")
    added = statistics.median(figures["bounded"]) - statistics.median(figures["httptools"])
    print(f"bounded heads add {added:.1f} µs per request")


if __name__ == "__main__":
    main()
