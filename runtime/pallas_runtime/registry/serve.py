"""Serve a registry app with uvicorn, with its lifetime controlled by task cancellation.

uvicorn normally takes over SIGINT/SIGTERM while it serves; `pallas run` serves the registry
next to agents in one process and `pallas registry` handles signals itself, so the server here
leaves signal handlers alone and stops gracefully when its task is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn

from pallas_runtime.registry.app import build_app
from pallas_runtime.registry.metrics import RegistryMetrics
from pallas_runtime.registry.source import CatalogueSource

DEFAULT_PORT = 24200
"""`pallas run`'s base port; the registry pod uses the deployment's `registry.port`."""


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host`:`port` (IPv6 when the host has a colon), ready to serve.

    Raises:
        OSError: the address is in use or not local.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says TCP; without it small responses wait ~40 ms on Nagle + delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_registry(
    source: CatalogueSource,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    metrics: RegistryMetrics | None = None,
    started: asyncio.Event | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve the registry over `source` until cancelled (the source runs for as long).

    Args:
        source: The catalogue source; started and stopped with the server.
        host: Interface to bind.
        port: TCP port (0 picks a free one; read it from `sock` if you need it).
        metrics: Metric families; default: new ones.
        started: Set once the socket accepts connections.
        sock: An already-bound socket to serve on instead of `host`/`port`.

    Raises:
        OSError: the address cannot be bound.
    """
    # Bind here: uvicorn answers a bind failure with sys.exit(), which would end `pallas run`.
    owned = sock is None
    listening = bind(host, port) if sock is None else sock
    config = uvicorn.Config(
        build_app(source, metrics=metrics),
        log_level="warning",
        access_log=False,
        lifespan="on",
        # Long-poll clients do not exist here; do not hold shutdown for idle keep-alives.
        timeout_graceful_shutdown=2,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise OSError(f"registry server on {host}:{port} stopped before it started")
            await asyncio.sleep(0.01)
        if started is not None:
            started.set()
        await asyncio.shield(task)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if owned:
            listening.close()
