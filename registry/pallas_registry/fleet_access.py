"""Who may use the fleet endpoint, and which agents each caller sees (docs/api.md §4, "Access").

The fleet checks a caller as the agents themselves do (docs/api.md §6), by each agent's rules:
its deployment's `spec.auth` (`none`, `kubernetes`, `oidc`) and its own `spec.access`.

- An agent of a deployment with `mode: none` admits everyone, as it does itself.
- `kubernetes`: a TokenReview says who the bearer is (once per bearer and audiences setting),
  and a SubjectAccessReview per agent whether RBAC lets them `invoke` it; `spec.access`
  restricts further. The registry's ServiceAccount may create both reviews (the operator adds it
  to the deployment's `system:auth-delegator` binding); under `pallas run` the kubeconfig's
  credentials ask.
- `oidc`: the JWT is verified against the issuer's keys (fastmcp's verifier, through the
  runtime's `OidcJudge`), then `spec.access` decides per agent.

The verdicts are the runtime's own judges' (`pallas_runtime.auth`), kept for the deployment's
`cacheSeconds` (kubernetes) or 30 s (oidc), never past the bearer's expiry, keyed by a digest of
the bearer, never the bearer. A check that cannot be made (API server or issuer down) is
`AuthUnavailable`: the agent is left out of what the caller sees and a call to it is refused, so
the fleet fails closed. The agent still checks the forwarded credential itself: the fleet's view
is a convenience on top of the agents' own enforcement, never a replacement for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from pallas_api.config import AccessConfig, KubernetesAuthConfig, OidcConfig
from pallas_api.render import render_oidc
from pallas_api.spec import AuthSpec
from pallas_registry.catalogue import Entry
from pallas_runtime.auth import OIDC_CACHE_SECONDS
from pallas_runtime.auth.cache import token_key
from pallas_runtime.auth.identity import AuthUnavailable, Caller, admits
from pallas_runtime.auth.kubernetes import KubernetesJudge, Reviewed, token_expiry
from pallas_runtime.auth.oidc import OidcJudge

log = logging.getLogger("pallas.registry.fleet")

MAX_ENTRIES = 10_000
"""Verdicts kept at most (least recently used go first): a flood of bearers costs bounded memory."""


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer …` value, else None."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def requires_auth(entries: Iterable[Entry]) -> bool:
    """Whether any agent listed (deleted ones aside) checks its callers."""
    return any(e.auth.mode != "none" for e in entries if e.status != "deleted")


class _Verdicts:
    """A TTL + LRU memo of values by key (a digest of the bearer is part of every key)."""

    def __init__(self) -> None:
        self._items: OrderedDict[tuple[Any, ...], tuple[float, Any]] = OrderedDict()

    async def get(
        self, key: tuple[Any, ...], ttl: float, expires_at: int | None, make: Callable[[], Awaitable[Any]]
    ) -> Any:
        now = time.monotonic()
        held = self._items.get(key)
        if held is not None and held[0] > now:
            self._items.move_to_end(key)
            return held[1]
        value = await make()  # AuthUnavailable propagates and is never kept
        until = now + ttl
        if expires_at is not None:
            until = min(until, now + expires_at - time.time())
        if until > now:
            self._items[key] = (until, value)
            self._items.move_to_end(key)
            while len(self._items) > MAX_ENTRIES:
                self._items.popitem(last=False)
        return value


@dataclass(frozen=True, slots=True)
class _Identity:
    """Who a bearer is under one deployment's auth settings (None: it does not authenticate)."""

    caller: Caller | None
    reviewed: Reviewed | None = None
    expires_at: int | None = None


def _oidc_config(auth: AuthSpec) -> OidcConfig:
    if auth.oidc is None:  # pragma: no cover - AuthSpec's validator requires it for mode oidc
        raise ValueError("auth.mode oidc without auth.oidc")
    return render_oidc(auth.oidc)


class FleetGate:
    """Decides, per bearer and agent, whether the caller may `invoke` the agent."""

    def __init__(self, *, kubernetes_config: Any = None) -> None:
        """Set up; nothing is asked until the first bearer arrives.

        Args:
            kubernetes_config: A lightkube `KubeConfig` for the reviews; default: the pod's
                ServiceAccount, else the kubeconfig.
        """
        self._kubernetes_config = kubernetes_config
        self._kubernetes: dict[tuple[str, ...], KubernetesJudge] = {}
        self._oidc: dict[str, OidcJudge] = {}
        self._verdicts = _Verdicts()

    def _kube_judge(self, auth: AuthSpec) -> KubernetesJudge:
        audiences = tuple(auth.kubernetes.audiences)
        judge = self._kubernetes.get(audiences)
        if judge is None:
            settings = KubernetesAuthConfig(audiences=list(audiences))
            judge = KubernetesJudge("", "", settings, AccessConfig(), config=self._kubernetes_config)
            self._kubernetes[audiences] = judge
        return judge

    def _oidc_judge(self, auth: AuthSpec) -> OidcJudge:
        config = _oidc_config(auth)
        key = config.model_dump_json()
        judge = self._oidc.get(key)
        if judge is None:
            judge = OidcJudge(config, AccessConfig())
            self._oidc[key] = judge
        return judge

    async def identify(self, token: str, auth: AuthSpec) -> _Identity:
        """Who `token` is under `auth` (a deployment's `spec.auth`, not `none`).

        Raises:
            AuthUnavailable: The API server or the issuer could not be asked.
        """
        digest = token_key(token)
        if auth.mode == "kubernetes":
            judge = self._kube_judge(auth)

            async def review() -> _Identity:
                reviewed = await judge.authenticate(token)
                caller = reviewed.caller if reviewed is not None else None
                return _Identity(caller, reviewed, token_expiry(token))

            ttl = auth.kubernetes.cache_seconds
            key: tuple[Any, ...] = ("kubernetes", tuple(auth.kubernetes.audiences), digest)
            identity: _Identity = await self._verdicts.get(key, ttl, token_expiry(token), review)
            return identity
        oidc = self._oidc_judge(auth)

        async def verify() -> _Identity:
            decision = await oidc.judge(token)
            if decision is None:
                return _Identity(None)
            return _Identity(decision.caller, None, decision.expires_at)

        key = ("oidc", _oidc_config(auth).model_dump_json(), digest)
        verified: _Identity = await self._verdicts.get(key, OIDC_CACHE_SECONDS, None, verify)
        return verified

    async def authenticates(self, token: str, entries: Sequence[Entry]) -> bool:
        """Whether `token` authenticates under the auth settings of any of `entries`.

        Raises:
            AuthUnavailable: No setting accepted it and at least one could not be asked.
        """
        unavailable: AuthUnavailable | None = None
        seen: set[str] = set()
        for entry in entries:
            if entry.auth.mode == "none" or (setting := entry.auth.model_dump_json()) in seen:
                continue
            seen.add(setting)
            try:
                if (await self.identify(token, entry.auth)).caller is not None:
                    return True
            except AuthUnavailable as exc:
                unavailable = exc
        if unavailable is not None:
            raise unavailable
        return False

    async def may_invoke(self, token: str | None, entry: Entry) -> bool:
        """Whether the bearer `token` (None: no credential) may talk to the agent of `entry`.

        Raises:
            AuthUnavailable: The decision cannot be made now.
        """
        auth = entry.auth
        if auth.mode == "none":
            return True
        if token is None:
            return False
        identity = await self.identify(token, auth)
        caller = identity.caller
        access = AccessConfig(subjects=list(entry.access.subjects), groups=list(entry.access.groups))
        if caller is None or not admits(access, caller):
            return False
        reviewed = identity.reviewed
        if auth.mode == "oidc" or reviewed is None:
            return auth.mode == "oidc"  # a JWT's claims decide alone; RBAC judges kubernetes
        namespace, agent = entry.key
        judge = self._kube_judge(auth)

        async def review() -> bool:
            return await judge.may_invoke(reviewed, agent, namespace)

        key = ("invoke", tuple(auth.kubernetes.audiences), token_key(token), namespace, agent)
        ttl = auth.kubernetes.cache_seconds
        allowed: bool = await self._verdicts.get(key, ttl, identity.expires_at, review)
        return allowed

    async def visible(self, token: str | None, entries: Sequence[Entry]) -> list[Entry]:
        """The `entries` whose agents the bearer may invoke; one that cannot be checked now is left out."""

        async def admitted(entry: Entry) -> bool:
            try:
                return await self.may_invoke(token, entry)
            except AuthUnavailable as exc:
                log.warning("fleet: %s left out of a caller's view: %s", entry.key[1], exc)
                return False

        verdicts = await asyncio.gather(*(admitted(entry) for entry in entries))
        return [entry for entry, shown in zip(entries, verdicts, strict=True) if shown]

    async def aclose(self) -> None:
        """Close the judges' connections."""
        for judge in self._kubernetes.values():
            await judge.aclose()
        self._kubernetes.clear()
        self._oidc.clear()


CHALLENGE = 'Bearer realm="pallas-fleet"'
RETRY_AFTER = "5"


def _refusal(status: int, error: str, description: str, challenge: str | None = None) -> Response:
    headers = {"Cache-Control": "no-store"}
    if challenge is not None:
        headers["WWW-Authenticate"] = challenge
    if status == 503:
        headers["Retry-After"] = RETRY_AFTER
    return JSONResponse({"error": error, "error_description": description}, status, headers)


class FleetDoor:
    """The fleet endpoint's HTTP check, in front of its MCP app.

    While any agent listed checks its callers, a request needs `Authorization: Bearer …` that
    authenticates under the auth settings of one of them: without one it is answered 401 with a
    `WWW-Authenticate: Bearer` challenge, with an invalid one 401 `error="invalid_token"`, two
    `Authorization` headers 400 (so no second token rides along to the agents), and a check that
    cannot be made now 503 with `Retry-After`. Which agents an authenticated caller sees and may
    call is the tools' business (`FleetGate.may_invoke`). With every agent open (`mode: none`)
    the door is open too, as the agents are. CORS preflights (`OPTIONS`) carry no credential and
    reach no tool: they pass.
    """

    def __init__(self, app: ASGIApp, gate: FleetGate, entries: Callable[[], Sequence[Entry]]) -> None:
        """Guard `app` by `gate`, over the catalogue's current `entries`."""
        self._app = app
        self._gate = gate
        self._entries = entries

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Let an authenticated request (or any, while every agent is open) through to the app."""
        if scope["type"] != "http" or scope.get("method") == "OPTIONS":
            await self._app(scope, receive, send)
            return
        entries = [e for e in self._entries() if e.status != "deleted"]
        refusal = await self._check(scope, entries) if requires_auth(entries) else None
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self._app(scope, receive, send)

    async def _check(self, scope: Scope, entries: Sequence[Entry]) -> Response | None:
        values = [value for name, value in scope.get("headers", ()) if name.lower() == b"authorization"]
        if len(values) > 1:
            return _refusal(400, "invalid_request", "more than one Authorization header; send one")
        token = bearer(values[0].decode("latin-1")) if values else None
        if token is None:
            return _refusal(
                401,
                "unauthorized",
                "the fleet endpoint needs Authorization: Bearer <token>, the credential its agents accept",
                CHALLENGE,
            )
        try:
            known = await self._gate.authenticates(token, entries)
        except AuthUnavailable as exc:
            return _refusal(503, "temporarily_unavailable", str(exc))
        if not known:
            return _refusal(
                401,
                "invalid_token",
                "the bearer is not a credential the fleet's agents accept (invalid, expired or foreign)",
                f'{CHALLENGE}, error="invalid_token"',
            )
        return None
