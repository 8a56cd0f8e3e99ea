"""The prober: verifies each available agent over MCP and calls its get_health on schedule.

One task per agent that is available. A result that differs from the last one asks for a
reconcile of the agent (which writes it into status); an unchanged one costs nothing, so
an agent that stays healthy causes no API writes.

How a probe authenticates follows the deployment's `auth.mode` (`ProbeAccess`): `none`, no
credentials; `kubernetes`, a short-lived token of the deployment's agents ServiceAccount (from
`Credentials`); `oidc`, none to hold, so only the authorization challenge is verified and
`get_health` is not called.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field

from pallas_api.spec import CallerAuth
from pallas_operator.engine import verification
from pallas_operator.engine.loops import KeyedLoops, Looping
from pallas_operator.service_resolver import ServiceResolver
from pallas_operator.status import HealthResult, Verification

log = logging.getLogger(__name__)
FOLLOW_CONFIG = 2.0
"""Seconds between health checks while the agent does not serve the config in its ConfigMap yet:
a live edit shows in `status.servedConfigHash` within seconds of the pod taking it, and the
checks go back to the deployment's interval once it has."""
RETRY_UNVERIFIED = (1.0, 2.0, 4.0, 10.0)
"""Seconds before each new verification attempt of an agent that failed it (the last repeats;
never longer than its interval). A new pod is often probed before its Service name resolves,
so the first retries come quickly. A table, not `pallas_io.backoff`: the steps are a policy (quick
while DNS catches up, then 10 s), not a doubling."""


@dataclass(frozen=True, slots=True)
class ProbeAccess:
    """How probes of one agent authenticate: its deployment's `spec.auth`, and whom for."""

    auth: CallerAuth = field(default_factory=CallerAuth)
    """What the agent asks of callers (oidc: the issuer its metadata must name)."""
    namespace: str = ""
    service_account: str = ""
    """kubernetes: the identity the probe's token is minted for (with `auth.audiences`)."""


OPEN = ProbeAccess()
NOT_CHECKABLE = (
    "spec.auth.mode is oidc and the operator holds no token of the issuer, so it does not call "
    "get_health; the agent's pallas_agent_health_status metric shows health as callers see it"
)


@dataclass(frozen=True, slots=True)
class ProbeTarget:
    """What to probe and how often; `rollout` changes when the agent's config does."""

    url: str
    interval: float
    health_time_limit: float
    verify_time_limit: float
    rollout: str
    access: ProbeAccess = OPEN
    config_hash: str | None = None
    """The config the agent should serve (its ConfigMap's): health is checked every
    `FOLLOW_CONFIG` seconds until the agent says it serves it."""


@dataclass
class _Agent(Looping[ProbeTarget]):
    verified_rollout: str | None = None
    failed_verifications: int = 0
    verification: Verification | None = None
    health: HealthResult | None = None


Headers = Mapping[str, str]
Verify = Callable[[str, float, Headers], Awaitable[Verification]]
Check = Callable[[str, float, Headers], Awaitable[HealthResult]]
Challenge = Callable[[str, float, str], Awaitable[Verification]]
Credentials = Callable[[ProbeAccess], Awaitable[str]]
"""A bearer token for probes of a kubernetes-mode agent; raises with a reason when there is none."""


async def _no_credentials(access: ProbeAccess) -> str:
    raise RuntimeError("the operator has no way to mint probe tokens")


class Prober:
    """Schedules and keeps the MCP checks of every available agent."""

    def __init__(
        self,
        resolver: ServiceResolver,
        notify: Callable[[Hashable], None],
        verify: Verify = verification.verify,
        check: Check = verification.check_health,
        *,
        credentials: Credentials = _no_credentials,
        challenge: Challenge = verification.verify_challenge,
    ) -> None:
        self._resolver = resolver
        self._notify = notify
        self._verify = verify
        self._check = check
        self._credentials = credentials
        self._challenge = challenge
        self._agents = KeyedLoops[ProbeTarget, _Agent](_Agent, self._run, "probe")

    def results(self, key: Hashable) -> tuple[Verification | None, HealthResult | None]:
        """The latest verification and health of an agent (None: nothing new since start)."""
        agent = self._agents.get(key)
        return (agent.verification, agent.health) if agent else (None, None)

    def track(self, key: Hashable, target: ProbeTarget | None) -> None:
        """Probe `key` at `target` from now on; None stops probing it and forgets its results."""
        self._agents.track(key, target)

    async def stop(self) -> None:
        """Stop every probe task."""
        await self._agents.stop()

    async def _headers(self, access: ProbeAccess) -> tuple[Headers, str]:
        """(headers, problem): the probe's credentials, or why there are none."""
        if access.auth.mode != "kubernetes":
            return {}, ""
        try:
            return {"Authorization": f"Bearer {await self._credentials(access)}"}, ""
        except Exception as exc:  # noqa: BLE001 - reported as the probe's failure, then retried
            return {}, str(exc)[:300] or type(exc).__name__

    async def _round(self, agent: _Agent) -> bool:
        """One verification (when due) and one health check; True when a result changed."""
        target = agent.target
        url = self._resolver.resolve(target.url)
        access = target.access
        headers, problem = await self._headers(access)
        changed = False
        if agent.verified_rollout != target.rollout:
            if problem:
                verification = Verification(ok=False, message=f"MCP verification of {url} failed: {problem}")
            elif access.auth.mode == "oidc":
                verification = await self._challenge(url, target.verify_time_limit, access.auth.issuer)
            else:
                verification = await self._verify(url, target.verify_time_limit, headers)
            if verification.ok:
                agent.verified_rollout = target.rollout
            changed = verification != agent.verification
            agent.verification = verification
        if agent.verification is not None and agent.verification.ok:
            if access.auth.mode == "oidc":
                health = HealthResult(None, NOT_CHECKABLE, checkable=False)
            elif problem:
                health = HealthResult(None, problem)
            else:
                health = await self._check(url, target.health_time_limit, headers)
            changed = changed or health != agent.health
            agent.health = health
        return changed

    async def _run(self, key: Hashable, agent: _Agent) -> None:
        while True:
            try:
                if await self._round(agent):
                    self._notify(key)
            except Exception:  # a probe never takes the operator down; the next round retries
                log.exception("probing %s failed", key)
            ok = agent.verification is not None and agent.verification.ok
            if ok:
                agent.failed_verifications = 0
                wait = agent.target.interval
                if _follows_config(agent):
                    wait = min(wait, FOLLOW_CONFIG)
            else:
                backoff = RETRY_UNVERIFIED[min(agent.failed_verifications, len(RETRY_UNVERIFIED) - 1)]
                agent.failed_verifications += 1
                wait = min(agent.target.interval, backoff)
            await agent.pause(wait)


def _follows_config(agent: _Agent) -> bool:
    """Whether the agent answered health checks but not yet with the config it should serve."""
    wanted, health = agent.target.config_hash, agent.health
    if wanted is None or health is None or health.status is None:
        return False
    # An older agent reports no hash: nothing to follow.
    return health.config_hash is not None and health.config_hash != wanted
