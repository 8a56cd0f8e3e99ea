"""Replicas of one MCP server behind one address, the way a Service spreads them (for tests).

A `ReplicaSet` is one ASGI app in front of several apps (the replicas), each with its own
sessions. Like kube-proxy it sends a connection to the replica that is `current` when the
connection makes its first request, and keeps it there (`route="connection"`: conntrack keeps an
established flow on its pod after the endpoints change); `route="request"` decides per request
instead, for a test that needs a request to land on another replica deterministically. Tests
move `current` and start or stop a replica's drain (the real `DrainGuard`) the way a rollout does.

Every request is recorded with the replica that got it, its JSON-RPC method and the HTTP status
it was answered with.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.types import Message, Receive, Scope, Send

from pallas_runtime.edge.draining import DrainGuard
from tests.support.mcp_servers import read_body, replaying


@dataclass(frozen=True)
class Routed:
    """One HTTP request as the replica set routed it."""

    replica: int
    method: str | None
    """The JSON-RPC method of a POST (None for other requests or a batch)."""
    status: int


@dataclass
class Replica:
    """One replica: its app behind the real drain guard, and whether it is draining."""

    app: Any
    draining: bool = False
    refused: int = 0

    def __post_init__(self) -> None:
        self.edge = DrainGuard(self.app, "replica", lambda: self.draining, self._count_refusal)

    def _count_refusal(self) -> None:
        self.refused += 1


@dataclass
class ReplicaSet:
    """An ASGI app sending each connection (or request) to the `current` replica."""

    replicas: list[Replica]
    route: Literal["connection", "request"] = "connection"
    current: int = 0
    on_routed: Callable[[Routed], None] | None = None
    """Called after each answered request (a test may move `current` from here)."""
    routed: list[Routed] = field(default_factory=list)
    _pinned: dict[Any, int] = field(default_factory=dict)

    def calls(self, replica: int, method: str = "tools/call", status: int = 200) -> int:
        """How many `method` requests `replica` answered with `status`."""
        return sum(1 for r in self.routed if (r.replica, r.method, r.status) == (replica, method, status))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        index = self._choose(scope)
        body = await read_body(receive)
        status = 0

        async def recorded(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self.replicas[index].edge(scope, replaying(body, receive), recorded)
        routed = Routed(index, _method(scope, body), status)
        self.routed.append(routed)
        if self.on_routed is not None:
            self.on_routed(routed)

    def _choose(self, scope: Scope) -> int:
        if self.route == "request":
            return self.current
        return self._pinned.setdefault(scope.get("client"), self.current)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """Run every replica's lifespan (their MCP session managers) for as long as the server runs."""
        async with contextlib.AsyncExitStack() as stack:
            await receive()  # lifespan.startup
            for replica in self.replicas:
                await stack.enter_async_context(replica.app.router.lifespan_context(replica.app))
            await send({"type": "lifespan.startup.complete"})
            while (await receive())["type"] != "lifespan.shutdown":
                pass
        await send({"type": "lifespan.shutdown.complete"})


def _method(scope: Scope, body: bytes) -> str | None:
    if scope.get("method") != "POST":
        return None
    try:
        message = json.loads(body or b"{}")
    except ValueError:
        return None
    return message.get("method") if isinstance(message, dict) else None
