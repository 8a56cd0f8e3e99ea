"""Serving ASGI apps with uvicorn, one way for every command (agents, the registry, `pallas run`).

Every listener reads requests through `http_limits.BoundedHttpToolsProtocol`: request heads are
bounded in size, header count and time before the app (and its access control) sees them.
Sockets are bound before uvicorn starts, so a taken port is an `OSError` the command reports in
one line (uvicorn would `sys.exit()` from inside the event loop). Servers leave signal handling to
their process: `pallas run` hosts many apps in one event loop, each of which would otherwise
install its own SIGINT/SIGTERM handlers over the others'; a server stops when its task is
cancelled.

Stopping is a drain: the app's `drain` runs while the server still listens and keeps its
connections (an agent lets its turns in flight finish and refuses new sessions; a request on a
client's keep-alive connection is still answered), but from its start every response is its
connection's last, those in progress included (`Connection: close`,
`BoundedHttpToolsProtocol.stop_keeping_alive`): a client's pool empties of this process one
request at a time, its next request goes over a new connection, which a Service sends to a
ready replica. Only then does uvicorn stop listening, close the connections left idle (idle
since before the drain) and wait `graceful_timeout` for what is left. A server can also hand its socket over
to another server of the same process (`hand_over`: `pallas run --reload`) and drain the
connections it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, NoReturn

import sniffio
import uvicorn
from starlette.types import ASGIApp

from pallas_api.fields import HttpLimits
from pallas_io import heap, tracing
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
    drain: Callable[[], Awaitable[object]] | None = None,
    hand_over: asyncio.Event | None = None,
    limits: HttpLimits | None = None,
    refused: Refused | None = None,
) -> None:
    """Serve `app` on `sock` until cancelled (or until the server stops by itself).

    Args:
        app: The ASGI app.
        sock: A listening socket (see `listen`); the caller closes it (the server listens on a
            duplicate of it, so the caller's stays open for another server).
        started: Set once the server accepts connections.
        graceful_timeout: Seconds open requests get once the server stops listening.
        drain: Awaited when the server is asked to stop, before it stops listening: the app
            finishes its work in flight (the agent lets its turns finish).
        hand_over: Once set, the server stops accepting connections (another server listens on
            the socket) and goes on serving those it has until it is cancelled.
        limits: Bounds on request heads and idle connections; the defaults of `HttpLimits`.
        refused: Told the reason of each request refused for its head (to count it).

    Raises:
        OSError: the server stopped before it started.
    """
    http = bounded_protocol(limits or HttpLimits(), refused)
    config = uvicorn.Config(
        app,
        # Our logging setup (pallas_io.logs): uvicorn's error and access lines go through it,
        # quiet (WARNING) unless PALLAS_ROOT_LOG_LEVEL asks for them; a quiet access log costs
        # nothing per request (uvicorn builds each line before the level check).
        log_config=None,
        access_log=logging.getLogger("uvicorn.access").isEnabledFor(logging.INFO),
        lifespan="on",
        http=http,
        timeout_graceful_shutdown=graceful_timeout,
        server_header=False,
    )
    server = _HostedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock.dup()]))
    handing_over: asyncio.Task[None] | None = None
    try:
        while not server.started:
            if task.done():
                task.result()
                raise OSError("the server stopped before it started")
            await asyncio.sleep(0.01)
        if started is not None:
            started.set()
        if hand_over is not None:
            handing_over = asyncio.create_task(_stop_listening(server, hand_over))
        await asyncio.shield(task)
    finally:
        if server.started:
            http.stop_keeping_alive(server.server_state.connections)
        if server.started and drain is not None:
            await _uncancellable(drain())
        if handing_over is not None:
            handing_over.cancel()
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _stop_listening(server: uvicorn.Server, hand_over: asyncio.Event) -> None:
    await hand_over.wait()
    for listener in server.servers:
        listener.close()


async def _uncancellable(work: Awaitable[object]) -> None:
    """Await `work` to its end even if the awaiting task is cancelled again meanwhile.

    The process asks the work to hurry by other means (`until_signalled(on_repeat=…)`).
    """
    future = asyncio.ensure_future(work)
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(future)
    if not future.cancelled() and (failure := future.exception()) is not None:
        logging.getLogger("pallas.serving").error("draining failed: %s", failure, exc_info=failure)


def run_server_loop(main: Coroutine[Any, Any, object]) -> None:
    """Run a serving command's main coroutine to the end, the way anyio's own runner would.

    The loop is uvloop's where it is installed (libuv's loop costs less per request than
    asyncio's). While it runs, sniffio is told that this thread runs asyncio, the way trio
    declares itself: otherwise every anyio call in the MCP SDK and httpx2 (hundreds per
    message) sniffs for the running library anew. (anyio.run sets sniffio's context variable
    instead, but uvicorn starts each connection's task from the loop's own context.)

    The command has built its app: the heap it holds now lives as long as the process, and
    is settled out of the garbage collector's way first (`heap.settle`).
    """
    heap.settle()
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


def leave(code: int) -> NoReturn:
    """End a serving process whose server has stopped: flush what it keeps, skip the teardown.

    The interpreter's own exit tears the heap down object by object, with full garbage
    collections between modules: about 2 s for an agent (py-spy: `gc_collect_main`), which a
    rollout, a scale-down and `pallas run` wait for and nothing needs, because the server has
    already closed its stores, sessions and connections. What the process still holds is
    flushed first: spans not yet exported, log handlers, stdout and stderr.
    """
    tracing.shutdown()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing more to say
            stream.flush()
    os._exit(code)


async def until_signalled(
    work: Coroutine[Any, Any, None], on_repeat: Callable[[], object] | None = None
) -> bool:
    """Run `work` until it ends or SIGTERM/SIGINT cancels it; whether a signal stopped it.

    A signal after the first calls `on_repeat` (a second Ctrl-C: stop draining, interrupt now).
    """
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(work)
    signalled = False

    def stop() -> None:
        nonlocal signalled
        if signalled:
            if on_repeat is not None:
                on_repeat()
            return
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
