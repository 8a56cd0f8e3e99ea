"""The A2A surface, its SDK imported after the agent says ready (issue 53, item 4).

The a2a-sdk (protobuf, google-api-core) is about 0.5 s of a loaded machine's start and ~28 MB,
needed only by a request to `/a2a` or the Agent Card. `DeferredA2A` serves both paths from the
start; the lifespan builds the real `A2ASurface` in the background once the agent is ready
(`load`), and a request that comes first waits for that same build.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from pallas_api.names import A2A_PATH, AGENT_CARD_PATH
from pallas_runtime.llm.deferred import LoadOnce

if TYPE_CHECKING:
    from pallas_runtime.server.a2a import A2ASurface

SDK_MODULE = "pallas_runtime.server.a2a"
"""The module whose import brings the a2a-sdk in (and marks its unused SQL stores first)."""


class DeferredA2A:
    """`build()`'s `A2ASurface`, built at the first A2A request or after ready, whichever is first."""

    def __init__(self, build: Callable[[], A2ASurface]) -> None:
        self._build = build
        self._surface: A2ASurface | None = None
        self._routes: dict[str, Route] = {}
        self.load = LoadOnce(self._import)
        """Import the SDK in a thread and build the surface (after ready, or at a first request)."""

    async def _import(self) -> None:
        await asyncio.to_thread(importlib.import_module, SDK_MODULE)
        surface = self._build()
        self._routes = {r.path: r for r in surface.routes() if isinstance(r, Route)}
        self._surface = surface

    def routes(self) -> list[BaseRoute]:
        """The card at the well-known path and the JSON-RPC endpoint, as `A2ASurface.routes`."""
        return [
            Route(AGENT_CARD_PATH, endpoint=_Forward(self, AGENT_CARD_PATH), methods=["GET"]),
            Route(A2A_PATH, endpoint=_Forward(self, A2A_PATH), methods=["POST"]),
        ]

    async def aclose(self) -> None:
        """Close the surface if it was built; a build under way is cancelled."""
        self.load.cancel()
        if self._surface is not None:
            await self._surface.aclose()

    async def serve(self, path: str, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request on `path` with the real surface's route, loading it first."""
        await self.load()
        await self._routes[path].app(scope, receive, send)


class _Forward:
    """An ASGI app for one of the surface's paths (a class, so Starlette's Route serves it as ASGI)."""

    def __init__(self, deferred: DeferredA2A, path: str) -> None:
        self._deferred = deferred
        self._path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._deferred.serve(self._path, scope, receive, send)
