"""The agent's auth provider for fastmcp: MCP authorization spec on top of our verifiers.

Built on fastmcp's own pieces: `RemoteAuthProvider` serves the RFC 9728 protected-resource
metadata and makes fastmcp wrap `/mcp` in its `RequireAuthMiddleware`, which answers 401 with
`WWW-Authenticate: Bearer resource_metadata="…"` to a request without a valid bearer and 403
`insufficient_scope` to a known caller without `INVOKE_SCOPE`. What is ours:

- `PallasVerifier` (a fastmcp `TokenVerifier`): the decision cache around the mode's judge, the
  `pallas_auth_requests_total` counter, and the last outage for `get_health`;
- the metadata also at the root `/.well-known/oauth-protected-resource` (clients that do not
  append the resource path look there), naming the agent's resource URL exactly as configured;
- authentication only on the MCP endpoint: `/healthz`, `/readyz`, `/metrics` and the metadata
  stay open, and a bearer sent to them (a Prometheus scrape token) is never looked at;
- an `AuthUnavailable` verdict answered 503 with a JSON error and `Retry-After` (fail closed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from fastmcp.server.auth import AccessToken, RemoteAuthProvider, TokenVerifier
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from pydantic import AnyHttpUrl
from starlette.authentication import AuthCredentials, AuthenticationError, BaseUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pallas_api.config import AccessConfig
from pallas_runtime.auth.cache import DecisionCache, token_key
from pallas_runtime.auth.identity import INVOKE_SCOPE, AuthUnavailable, Decision, access_token
from pallas_runtime.auth.judge import Judge
from pallas_runtime.metrics import RuntimeMetrics

log = logging.getLogger("pallas.auth")
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
WELL_KNOWN = "/.well-known/"
ROOT_METADATA = "/.well-known/oauth-protected-resource"
RETRY_AFTER = "5"
OUTAGE_MEMORY = 300.0
"""Seconds a failed access check keeps `get_health` degraded unless a check succeeds first."""


class PallasVerifier(TokenVerifier):
    """Bearer → cached decision of the mode's judge → fastmcp AccessToken (or None: 401)."""

    def __init__(self, agent: str, judge: Judge, cache: DecisionCache, metrics: RuntimeMetrics) -> None:
        super().__init__(required_scopes=[INVOKE_SCOPE])
        self._agent = agent
        self._judge = judge
        self._cache = cache
        self._requests = metrics.auth_requests_total
        self._outage: tuple[float, str] | None = None

    def admit(self, access: AccessConfig) -> None:
        """Decide by these access lists from now on; decisions made by the old ones are dropped."""
        self._judge.access = access
        self._cache.clear()

    def problem(self) -> str | None:
        """Why access checks failed lately (for `get_health`), or None."""
        if self._outage is None or time.monotonic() - self._outage[0] > OUTAGE_MEMORY:
            return None
        return self._outage[1]

    async def _lookup(self, token: str) -> Decision | None:
        decision = await self._judge.judge(token)
        self._outage = None
        if decision is None:
            log.info("%s: refused a bearer that did not authenticate", self._agent)
        elif not decision.allowed:
            log.info("%s: %s may not invoke this agent", self._agent, decision.caller.subject)
        return decision

    async def verify_token(self, token: str) -> AccessToken | None:
        """The AccessToken for `token`, or None when it does not authenticate.

        Raises:
            AuthUnavailable: The decision cannot be made now (answered 503).
        """
        try:
            decision, _ = await self._cache.decide(token_key(token), lambda: self._lookup(token))
        except AuthUnavailable as exc:
            self._outage = (time.monotonic(), str(exc))
            self._requests.labels(self._agent, "unavailable").inc()
            log.warning("%s: %s", self._agent, exc)
            raise
        if decision is None:
            self._requests.labels(self._agent, "unauthenticated").inc()
            return None
        self._requests.labels(self._agent, "allowed" if decision.allowed else "denied").inc()
        return access_token(token, decision)

    async def aclose(self) -> None:
        """Close the judge's connections."""
        await self._judge.aclose()


class _McpBearerBackend(BearerAuthBackend):
    """The SDK's bearer backend, consulted for the MCP endpoint only."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        path = conn.scope.get("path", "")
        if path in OPEN_PATHS or path.startswith(WELL_KNOWN):
            return None
        result: tuple[AuthCredentials, BaseUser] | None = await super().authenticate(conn)
        return result


def _unavailable(_: HTTPConnection, exc: AuthenticationError) -> Response:
    if not isinstance(exc, AuthUnavailable):  # pragma: no cover - our verifier raises nothing else
        return JSONResponse({"error": "invalid_request", "error_description": "bad credentials"}, 400)
    return JSONResponse(
        {"error": "temporarily_unavailable", "error_description": str(exc)},
        status_code=503,
        headers={"Retry-After": RETRY_AFTER, "Cache-Control": "no-store"},
    )


class PallasAuth(RemoteAuthProvider):
    """fastmcp's remote-auth provider with our verifier, resource URL and open routes."""

    def __init__(
        self,
        verifier: PallasVerifier,
        *,
        resource: str,
        authorization_servers: Sequence[str],
        resource_name: str,
    ) -> None:
        super().__init__(
            token_verifier=verifier,
            authorization_servers=[AnyHttpUrl(s) for s in authorization_servers],
            base_url=resource,
            scopes_supported=[],
            challenge_scopes=[],  # INVOKE_SCOPE is our decision, not something to ask an issuer for
            resource_name=resource_name,
        )
        self.verifier = verifier
        self._resource = AnyHttpUrl(resource)

    def _get_resource_url(self, path: str | None = None) -> AnyHttpUrl | None:
        # The agent's URL as its callers use it (public or cluster DNS), whatever the mount path.
        return self._resource

    def get_routes(self, mcp_path: str | None = None) -> list[Route]:
        """The RFC 9728 metadata at its path-suffixed location and at the root."""
        routes = list(super().get_routes(mcp_path))
        metadata = next(r for r in routes if r.path.startswith(ROOT_METADATA))
        if metadata.path != ROOT_METADATA:
            routes.append(Route(ROOT_METADATA, endpoint=metadata.app, methods=["GET", "OPTIONS"]))
        return routes

    def get_middleware(self) -> list[Any]:
        """Authentication for `/mcp` only, with 503 for an unavailable decision."""
        return [
            Middleware(
                AuthenticationMiddleware,
                backend=_McpBearerBackend(self),
                on_error=_unavailable,
            ),
            Middleware(AuthContextMiddleware),
        ]
