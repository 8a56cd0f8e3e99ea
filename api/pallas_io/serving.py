"""Serving ASGI apps with uvicorn, one way for every command (agents, the registry, `pallas run`).

Every listener reads requests through `http_limits.BoundedHttpToolsProtocol`: request heads are
bounded in size, header count and time before the app (and its access control) sees them.
Sockets are bound before uvicorn starts, so a taken port is an `OSError` the command reports in
one line (uvicorn would `sys.exit()` from inside the event loop). Servers leave signal handling to
their process: `pallas run` hosts many apps in one event loop, each of which would otherwise
install its own SIGINT/SIGTERM handlers over the others'; a server stops when its task is
cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

import sniffio
import uvicorn
from starlette.types import ASGIApp

from pallas_api.config import HttpLimits
from pallas_io.http_limits import Refused, bounded_protocol


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host`:`port` (IPv6 when the host has a colon), listening.

    Raises:
        OSError: the address is in use or not local.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says so, and without it small responses wait ~40 ms for delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def bound_port(sock: socket.socket) -> int:
    """The port a socket is bound to (what port 0 became)."""
    return int(sock.getsockname()[1])


class _HostedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to its host process."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    app: ASGIApp,
    sock: socket.socket,
    *,
    started: asyncio.Event | None = None,
    graceful_timeout: int = 10,
    before_stop: Callable[[], Awaitable[object]] | None = None,
    limits: HttpLimits | None = None,
    refused: Refused | None = None,
) -> None:
    """Serve `app` on `sock` until cancelled (or until the server stops by itself).

    Args:
        app: The ASGI app.
        sock: A listening socket (see `listen`); the caller closes it.
        started: Set once the server accepts connections.
        graceful_timeout: Seconds in-flight requests get when the server is stopped.
        before_stop: Awaited when the server is asked to stop, before it stops accepting: what
            runs in the app can end its requests first (the agent answers "shutting down").
        limits: Bounds on request heads and idle connections; the defaults of `HttpLimits`.
        refused: Told the reason of each request refused for its head (to count it).

    Raises:
        OSError: the server stopped before it started.
    """
    config = uvicorn.Config(
        app,
        # Our logging setup (pallas_io.logs): uvicorn's error and access lines go through it,
        # quiet (WARNING) unless PALLAS_ROOT_LOG_LEVEL asks for them; a quiet access log costs
        # nothing per request (uvicorn builds each line before the level check).
        log_config=None,
        access_log=logging.getLogger("uvicorn.access").isEnabledFor(logging.INFO),
        lifespan="on",
        http=bounded_protocol(limits or HttpLimits(), refused),
        timeout_graceful_shutdown=graceful_timeout,
        server_header=False,
    )
    server = _HostedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise OSError("the server stopped before it started")
            await asyncio.sleep(0.01)
        if started is not None:
            started.set()
        await asyncio.shield(task)
    finally:
        if before_stop is not None and server.started:
            with contextlib.suppress(Exception):
                await asyncio.shield(before_stop())
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


def run_server_loop(main: Coroutine[Any, Any, object]) -> None:
    """Run a serving command's main coroutine to the end, the way anyio's own runner would.

    The loop is uvloop's where it is installed (libuv's loop costs less per request than
    asyncio's). While it runs, sniffio is told that this thread runs asyncio, the way trio
    declares itself: otherwise every anyio call in the MCP SDK and httpx2 (hundreds per
    message) sniffs for the running library anew. (anyio.run sets sniffio's context variable
    instead, but uvicorn starts each connection's task from the loop's own context.)
    """
    previous, sniffio.thread_local.name = sniffio.thread_local.name, "asyncio"
    try:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - a runtime dependency; a bare checkout may lack it
            asyncio.run(main)
            return
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main)
    finally:
        sniffio.thread_local.name = previous


async def until_signalled(work: Coroutine[Any, Any, None]) -> bool:
    """Run `work` until it ends or SIGTERM/SIGINT cancels it; whether a signal stopped it."""
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(work)
    signalled = False

    def stop() -> None:
        nonlocal signalled
        signalled = True
        task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return signalled
