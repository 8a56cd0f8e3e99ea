"""The registry's HTTP app (Starlette): the catalogue endpoints over any `CatalogueSource`.

Routes (docs/registry.md has the details):

- `GET /.well-known/mcp/server.json` — every matching entry, `{"servers": [...]}` (Daedalus).
- `GET /v0.1/servers` — one page: `{"servers": [...], "metadata": {"count", "nextCursor"?}}`.
- `GET /v0.1/servers/{serverName}/versions` and `.../versions/{version}` (`latest` or exact);
  the name is URL-encoded (`%2F`), a literal `/` works too.
- `GET /a2a/agent-cards` — the A2A Agent Cards of the agents, read from them (`agent_cards.py`).
- `GET /.well-known/mcp/catalog.json` — the MCP Catalog: the agents' MCP Server Cards, read from
  them (SEP-2127, a draft; `agent_cards.py`).
- `/mcp` — the fleet as one MCP server (`fleet.py`, its access check `fleet_access.py`): discovery
  and health tools, and one tool per agent relaying a message to it.
- `GET /healthz` (200 while the process runs, with the LLM provider checks: `providers.py`),
  `/readyz` (503 until the source's first full list), `/metrics`.

Errors are `{"error": "..."}` JSON with a 4xx status (`parameter` names the culprit); the app
starts the source in its lifespan and restarts it should it ever fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pallas_api import names
from pallas_registry.agent_cards import CardReader, agent_cards, server_cards
from pallas_registry.catalogue import encode
from pallas_registry.fleet import Fleet
from pallas_registry.guard import FLEET, SERVERS, WELL_KNOWN, Guard
from pallas_registry.metrics import CONTENT_TYPE, RegistryMetrics
from pallas_registry.providers import ProviderChecks
from pallas_registry.query import SERVER_NAME, BadParameter, Query, page, parse_query, select
from pallas_registry.responses import JSON, Rendered, ResponseCache, error, respond, server_list
from pallas_registry.source import CatalogueSource

log = logging.getLogger("pallas.registry")

_RESTART_DELAY = 1.0
AGENT_CARDS = "/a2a/agent-cards"


async def _supervise(source: CatalogueSource) -> None:
    # A source retries its own I/O; this only catches a bug escaping run(), so the registry keeps
    # serving the last catalogue and tries again instead of dying silently.
    while True:
        try:
            await source.run()
        except Exception:
            log.exception("registry: the catalogue source failed; restarting it")
            source.count_restart("crash")
        await asyncio.sleep(_RESTART_DELAY)


class _Handlers:
    def __init__(
        self, source: CatalogueSource, metrics: RegistryMetrics, cache: ResponseCache, checks: ProviderChecks
    ) -> None:
        self.source = source
        self.metrics = metrics
        self.cache = cache
        self.checks = checks
        self.cards = agent_cards()
        self.server_cards = server_cards()

    def _not_ready(self) -> Response | None:
        # An empty catalogue before the first list would tell clients there are no agents.
        if self.source.ready:
            return None
        response = error(503, "the catalogue is not loaded yet; retry shortly")
        response.headers["Retry-After"] = "1"
        return response

    def _render_list(self, query: Query, *, paged: bool) -> Rendered:
        catalogue = self.source.store.snapshot()
        key = (catalogue.version, paged, query if paged else dataclasses.replace(query, after=None, limit=0))
        rendered = self.cache.get(key)
        if rendered is not None:
            return rendered
        entries = select(catalogue, query)
        if not paged:
            return self.cache.put(key, Rendered.of(server_list(entries)))
        items, next_cursor = page(entries, query)
        metadata: dict[str, object] = {"count": len(items)}
        if next_cursor is not None:
            metadata["nextCursor"] = next_cursor
        return self.cache.put(key, Rendered.of(server_list(items, metadata)))

    def _list(self, request: Request, *, paged: bool) -> Response:
        if (unavailable := self._not_ready()) is not None:
            return unavailable
        try:
            query = parse_query(request.query_params.multi_items())
            return respond(request, self._render_list(query, paged=paged))
        except BadParameter as exc:
            return error(400, str(exc), exc.parameter)

    async def well_known(self, request: Request) -> Response:
        return self._list(request, paged=False)

    async def servers(self, request: Request) -> Response:
        return self._list(request, paged=True)

    async def server(self, request: Request) -> Response:
        if (unavailable := self._not_ready()) is not None:
            return unavailable
        # Parse the raw path: the decoded one cannot tell an encoded `%2F` in the name from a
        # separator, and some ASGI adapters leave the query on raw_path.
        raw = (request.scope.get("raw_path") or request.url.path.encode()).partition(b"?")[0]
        rest = raw.decode("latin-1").removeprefix(SERVERS + "/")
        if rest.endswith("/versions"):
            name_part, version_part = rest.removesuffix("/versions"), None
        elif "/versions/" in rest:
            name_part, version_part = rest.rsplit("/versions/", 1)
        else:
            return error(404, f"no such path; use {SERVERS}/{{serverName}}/versions[/{{version}}]")
        try:
            name = unquote(name_part, errors="strict")
        except UnicodeDecodeError:
            return _not_utf8("serverName")
        version = None
        if version_part is not None:
            try:
                version = unquote(version_part, errors="strict")
            except UnicodeDecodeError:
                return _not_utf8("version")
        if len(name) > 200 or not SERVER_NAME.match(name):
            return error(400, "invalid parameter 'serverName': expected <reverse-dns>/<name>", "serverName")
        try:
            include_deleted = parse_query(request.query_params.multi_items()).include_deleted
        except BadParameter as exc:
            return error(400, str(exc), exc.parameter)
        entry = self.source.store.snapshot().by_name.get(name)
        if entry is None or (entry.status == "deleted" and not include_deleted):
            return error(404, "Server not found")
        if version is None:
            return respond(request, Rendered.of(server_list([entry], {"count": 1})))
        if version not in ("latest", entry.version):
            return error(404, "Server version not found")
        return respond(request, Rendered.of(entry.body))

    async def _cards(self, request: Request, reader: CardReader) -> Response:
        if (unavailable := self._not_ready()) is not None:
            return unavailable
        ready_only = request.query_params.get("ready") == "true"
        document = await reader.document(self.source.store.snapshot().entries, ready_only=ready_only)
        return Response(encode(document), media_type=JSON)

    async def agent_cards(self, request: Request) -> Response:
        return await self._cards(request, self.cards)

    async def catalog(self, request: Request) -> Response:
        response = await self._cards(request, self.server_cards)
        response.headers["Access-Control-Allow-Origin"] = "*"  # the draft's CORS, for browsers
        return response

    async def healthz(self, request: Request) -> Response:
        # Always 200 (a liveness probe: restarting fixes no provider), with the provider checks
        # as the original's /healthz had them; `degraded` when one failed.
        return Response(encode(self.checks.health()), media_type=JSON)

    async def readyz(self, request: Request) -> Response:
        if self.source.ready:
            return Response(encode({"status": "ready"}), media_type=JSON)
        return error(503, "not ready: waiting for the first full list of agents")

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.exposition(), media_type=CONTENT_TYPE)


def _not_utf8(parameter: str) -> Response:
    return error(400, f"invalid parameter {parameter!r}: not valid UTF-8 once decoded", parameter)


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    message = {
        404: "no such path",
        405: "method not allowed; the registry is read-only (GET)",
        500: "internal error",
    }
    response = error(status, message.get(status, "request failed"))
    if isinstance(exc, HTTPException) and exc.headers:
        response.headers.update(exc.headers)
    return response


def build_app(
    source: CatalogueSource,
    *,
    metrics: RegistryMetrics | None = None,
    start_source: bool = True,
    cache_size: int = 256,
    providers: ProviderChecks | None = None,
    kubernetes_config: Any = None,
) -> Guard:
    """The registry ASGI app over `source`.

    Args:
        source: Where the catalogue comes from.
        metrics: Metric families to record into; default: new ones with process metrics.
        start_source: Run `source.run()` for the app's lifetime (its lifespan); turn off when the
            caller runs the source itself.
        cache_size: Rendered responses kept per app.
        providers: The LLM provider checks (published on `/healthz` and `/metrics`, run with the
            source); default: checks of `source.provider_targets()`.
        kubernetes_config: The lightkube `KubeConfig` the fleet endpoint asks the API server about
            its callers with (`auth.mode: kubernetes`); default: the pod's ServiceAccount, else
            the kubeconfig.

    Returns:
        An ASGI app (Starlette, wrapped by the size/metrics guard).
    """
    metrics = metrics or RegistryMetrics(source)
    checks = providers or ProviderChecks(source.provider_targets)
    metrics.watch_providers(checks)
    handlers = _Handlers(source, metrics, ResponseCache(cache_size), checks)
    fleet = Fleet(source, checks, kubernetes_config=kubernetes_config)
    fleet_app = fleet.mcp.http_app(path=FLEET, host_origin_protection="auto")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        tasks = (
            [asyncio.create_task(_supervise(source)), asyncio.create_task(checks.run())]
            if start_source
            else []
        )
        tasks.append(asyncio.create_task(fleet.watch()))
        try:
            async with fleet_app.router.lifespan_context(fleet_app):
                yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await handlers.cards.aclose()
            await handlers.server_cards.aclose()
            await fleet.aclose()

    routes = [
        Route(WELL_KNOWN, handlers.well_known, methods=["GET"]),
        Route(SERVERS, handlers.servers, methods=["GET"]),
        Route(SERVERS + "/{rest:path}", handlers.server, methods=["GET"]),
        Route(AGENT_CARDS, handlers.agent_cards, methods=["GET"]),
        Route(names.MCP_CATALOG_PATH, handlers.catalog, methods=["GET"]),
        Route("/healthz", handlers.healthz, methods=["GET"]),
        Route("/readyz", handlers.readyz, methods=["GET"]),
        Route("/metrics", handlers.metrics_text, methods=["GET"]),
        # The fleet's MCP app as it is (its own middleware and routes), behind its own access
        # check (`fleet_access.FleetDoor`): it answers at FLEET only.
        Route(FLEET, fleet.door(fleet_app)),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={404: _http_error, 405: _http_error, Exception: _http_error},
    )
    return Guard(app, metrics)
