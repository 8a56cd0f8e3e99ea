"""Leader election on a coordination.k8s.io Lease, as client-go does it.

Only the holder of the Lease runs the operator; standbys wait. Expiry is judged by the local
clock since the candidate last saw the record change, never by comparing timestamps written by
another machine, so clock skew between nodes cannot make two replicas leaders.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from dataclasses import dataclass

from lightkube import ApiError, AsyncClient
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    """Where the Lease is and how long leadership lasts without renewal."""

    name: str
    namespace: str
    identity: str
    duration: float = 30.0
    """Seconds a standby waits after the last renewal it saw before taking over."""
    renew_every: float = 10.0
    """Seconds between renewals (one API write each)."""
    retry_every: float = 2.0
    """Seconds between attempts while not leader, or after a failed renewal."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaderElector:
    """Acquires, renews and releases the Lease for one candidate."""

    def __init__(self, client: AsyncClient, config: LeaseConfig) -> None:
        self._client = client
        self._config = config
        self._observed: tuple[str | None, object] | None = None
        self._observed_at = 0.0
        self._last_renewal = 0.0

    def _expired(self, spec: LeaseSpec) -> bool:
        record = (spec.holderIdentity, spec.renewTime)
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        duration = spec.leaseDurationSeconds or self._config.duration
        return time.monotonic() > self._observed_at + duration

    async def _try(self) -> bool:
        """One attempt to become (or stay) the holder; True when this candidate holds the Lease."""
        cfg = self._config
        now = _now()
        try:
            lease = await self._client.get(Lease, cfg.name, namespace=cfg.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            spec = LeaseSpec(
                holderIdentity=cfg.identity, leaseDurationSeconds=int(cfg.duration),
                acquireTime=now, renewTime=now, leaseTransitions=0,
            )  # fmt: skip
            await self._client.create(
                Lease(metadata=ObjectMeta(name=cfg.name, namespace=cfg.namespace), spec=spec)
            )
            return True
        spec = lease.spec or LeaseSpec()
        mine = spec.holderIdentity == cfg.identity
        if not mine and spec.holderIdentity and not self._expired(spec):
            return False
        if not mine:
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        spec.holderIdentity = cfg.identity
        spec.leaseDurationSeconds = int(cfg.duration)
        spec.renewTime = now
        lease.spec = spec
        # replace carries the resourceVersion we read: a concurrent writer makes it fail with 409.
        await self._client.replace(lease)
        return True

    async def _attempt(self) -> bool:
        try:
            return await self._try()
        except ApiError as exc:
            log.debug("lease %s: %s", self._config.name, exc.status.message)
            return False

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this candidate holds the Lease (True) or `stop` is set (False)."""
        while not stop.is_set():
            if await self._attempt():
                self._last_renewal = time.monotonic()
                log.info("became leader (lease %s/%s)", self._config.namespace, self._config.name)
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._config.retry_every)
        return False

    async def hold(self, stop: asyncio.Event) -> None:
        """Renew until `stop` is set, or return as soon as leadership is lost.

        Leadership is lost when another holder shows up or renewals keep failing for two thirds
        of the duration (client-go's renew deadline), before any standby could take over.
        """
        cfg = self._config
        deadline = cfg.duration * 2 / 3
        while not stop.is_set():
            wait = (
                cfg.renew_every
                if time.monotonic() - self._last_renewal < cfg.retry_every
                else cfg.retry_every
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if stop.is_set():
                return
            if await self._attempt():
                self._last_renewal = time.monotonic()
            elif time.monotonic() - self._last_renewal > deadline:
                log.error("lost leadership (lease %s/%s)", cfg.namespace, cfg.name)
                return

    async def release(self) -> None:
        """Give the Lease up so a standby takes over at once (best effort)."""
        cfg = self._config
        try:
            lease = await self._client.get(Lease, cfg.name, namespace=cfg.namespace)
            if lease.spec is None or lease.spec.holderIdentity != cfg.identity:
                return
            lease.spec.holderIdentity = None
            lease.spec.leaseDurationSeconds = 1
            await self._client.replace(lease)
            log.info("released leadership (lease %s/%s)", cfg.namespace, cfg.name)
        except ApiError as exc:
            log.warning("could not release lease %s: %s", cfg.name, exc.status.message)
