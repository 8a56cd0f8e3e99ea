"""Serving ASGI apps with uvicorn the same way in every command."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator, Sequence

import uvicorn
from fastmcp import FastMCP
from starlette.types import ASGIApp

from pallas_runtime.config import AgentConfig


def agent_app(server: FastMCP, allowed_hosts: Sequence[str] = ()) -> ASGIApp:
    """The agent's HTTP app: MCP at /mcp plus the probe and metrics routes.

    DNS-rebinding protection is explicit: fastmcp 4.1.2's setting defaults to off. In "auto"
    mode it checks Host and Origin for servers bound to loopback (all of `pallas run`); listed
    hosts turn the check on for any bind address (e.g. the Service DNS names of a pod), and the
    server's own address is always accepted, so probes and scrapes by pod IP still work.
    """
    return server.http_app(
        path="/mcp", host_origin_protection="auto", allowed_hosts=list(allowed_hosts) or None
    )


def uvicorn_server(app: ASGIApp, host: str, port: int) -> uvicorn.Server:
    """A uvicorn server whose logs go through ours (no access log: metrics cover requests)."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
        server_header=False,
    )
    return uvicorn.Server(config)


def listen(host: str, port: int) -> socket.socket:
    """A bound listening socket, so a taken port is an OSError here rather than uvicorn's
    sys.exit() from inside the event loop."""
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
    sock.set_inheritable(True)
    return sock


async def wait_started(server: uvicorn.Server, task: asyncio.Task[None]) -> None:
    """Wait until uvicorn serves; raise if it stopped first."""
    while not server.started:
        if task.done():
            await task
            raise OSError("the server stopped while starting")
        await asyncio.sleep(0.01)


def secret_env_names(config: AgentConfig) -> list[str]:
    """Environment variables of `config` that hold secrets (redacted from logs)."""
    names = [config.provider.api_key_env] if config.provider.api_key_env else []
    names += [h.value_from_env for s in config.servers for h in s.headers if h.value_from_env]
    return names


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to its host process.

    `pallas run` serves many apps in one event loop; each uvicorn server would otherwise install
    its own SIGINT/SIGTERM handlers over the others'.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def embedded_server(app: ASGIApp, host: str, port: int) -> EmbeddedServer:
    """Like `uvicorn_server`, for one of several servers in a process."""
    server = uvicorn_server(app, host, port)
    return EmbeddedServer(server.config)
