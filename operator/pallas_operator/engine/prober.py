"""The prober: verifies each available agent over MCP and calls its get_health on schedule.

One task per agent that is available. A result that differs from the last one asks for a
reconcile of the agent (which writes it into status); an unchanged one costs nothing, so
an agent that stays healthy causes no API writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

from pallas_operator.engine import checks
from pallas_operator.services import ServiceResolver
from pallas_operator.status import HealthResult, Verification

log = logging.getLogger(__name__)
RETRY_UNVERIFIED = (1.0, 2.0, 4.0, 10.0)
"""Seconds before each new verification attempt of an agent that failed it (the last repeats;
never longer than its interval). A new pod is often probed before its Service name resolves,
so the first retries come quickly."""


@dataclass(frozen=True, slots=True)
class ProbeTarget:
    """What to probe and how often; `rollout` changes when the agent's config does."""

    url: str
    interval: float
    health_budget: float
    verify_budget: float
    rollout: str


@dataclass
class _Agent:
    target: ProbeTarget
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    verified_rollout: str | None = None
    failed_verifications: int = 0
    verification: Verification | None = None
    health: HealthResult | None = None
    task: asyncio.Task[None] | None = None


Verify = Callable[[str, float], Awaitable[Verification]]
Check = Callable[[str, float], Awaitable[HealthResult]]


class Prober:
    """Schedules and keeps the MCP checks of every available agent."""

    def __init__(
        self,
        resolver: ServiceResolver,
        notify: Callable[[Hashable], None],
        verify: Verify = checks.verify,
        check: Check = checks.check_health,
    ) -> None:
        self._resolver = resolver
        self._notify = notify
        self._verify = verify
        self._check = check
        self._agents: dict[Hashable, _Agent] = {}

    def results(self, key: Hashable) -> tuple[Verification | None, HealthResult | None]:
        """The latest verification and health of an agent (None: nothing new since start)."""
        agent = self._agents.get(key)
        return (agent.verification, agent.health) if agent else (None, None)

    def track(self, key: Hashable, target: ProbeTarget | None) -> None:
        """Probe `key` at `target` from now on; None stops probing it and forgets its results."""
        agent = self._agents.get(key)
        if target is None:
            if agent is not None:
                del self._agents[key]
                if agent.task is not None:
                    agent.task.cancel()
            return
        if agent is None:
            agent = self._agents[key] = _Agent(target)
            agent.task = asyncio.create_task(self._run(key, agent), name=f"probe-{key}")
        elif agent.target != target:
            agent.target = target
            agent.wake.set()

    async def stop(self) -> None:
        """Stop every probe task."""
        tasks = [a.task for a in self._agents.values() if a.task is not None]
        self._agents.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _round(self, agent: _Agent) -> bool:
        """One verification (when due) and one health check; True when a result changed."""
        target = agent.target
        url = self._resolver.resolve(target.url)
        changed = False
        if agent.verified_rollout != target.rollout:
            verification = await self._verify(url, target.verify_budget)
            if verification.ok:
                agent.verified_rollout = target.rollout
            changed = verification != agent.verification
            agent.verification = verification
        if agent.verification is not None and agent.verification.ok:
            health = await self._check(url, target.health_budget)
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
            else:
                backoff = RETRY_UNVERIFIED[min(agent.failed_verifications, len(RETRY_UNVERIFIED) - 1)]
                agent.failed_verifications += 1
                wait = min(agent.target.interval, backoff)
            agent.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(agent.wake.wait(), wait)
