"""Reading each deployment's LLM provider checks from its registry.

The registry checks every provider of its deployment with the keys its pod holds (the operator
holds none: it keeps Secret digests only) and says what it found on its `/healthz`
(docs/registry.md, "Provider checks"). This reads that report every `healthCheck.intervalSeconds`
while the registry is available; a report that differs from the last one asks for a reconcile of
the deployment, which writes it into `status.providers`. An unchanged one costs nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

import httpx2
from pydantic import ValidationError

from pallas_api.status import ProviderStatus
from pallas_operator.engine.loops import KeyedLoops, Looping
from pallas_operator.engine.verification import MAX_MESSAGE
from pallas_operator.service_resolver import ServiceResolver
from pallas_operator.status import ProviderCheck, ProviderReport

log = logging.getLogger(__name__)
INCOMPLETE_RETRY = 2.0
"""Seconds before reading again a report that lacks providers (a registry just started checks)."""


@dataclass(frozen=True, slots=True)
class ReportSource:
    """Where a deployment's report is and how often to read it."""

    url: str
    """The registry's `/healthz` (its cluster URL; the resolver may redirect it)."""
    deployment: str
    interval: float
    time_limit: float
    expected: int = 0
    """Providers the deployment has: until all are reported, the report is read again soon."""


def _checks(body: Any, deployment: str) -> tuple[ProviderCheck, ...]:
    entries = body.get("providers") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        raise ValueError("no 'providers' list")
    checks = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("deployment", deployment) != deployment:
            continue
        status = ProviderStatus.model_validate(entry)
        checks.append(
            ProviderCheck(
                status.name, status.type, status.status, status.message[:MAX_MESSAGE], tuple(status.models)
            )
        )
    return tuple(checks)


async def read_report(url: str, deployment: str, time_limit: float) -> ProviderReport:
    """GET the registry's `/healthz` and take its provider checks; never raises."""
    try:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(time_limit)) as client:
            response = await client.get(url)
        if response.status_code != 200:
            return ProviderReport(None, f"GET {url}: HTTP {response.status_code}")
        return ProviderReport(_checks(response.json(), deployment))
    except httpx2.HTTPError as exc:
        return ProviderReport(None, f"GET {url}: {type(exc).__name__}: {exc}"[:MAX_MESSAGE])
    except (ValueError, ValidationError) as exc:
        return ProviderReport(None, f"GET {url}: not a provider report: {exc}"[:MAX_MESSAGE])


Read = Callable[[str, str, float], Awaitable[ProviderReport]]


@dataclass
class _Deployment(Looping[ReportSource]):
    report: ProviderReport | None = None


class ProviderReports:
    """One reading task per deployment whose registry is available."""

    def __init__(
        self, resolver: ServiceResolver, notify: Callable[[Hashable], None], read: Read = read_report
    ) -> None:
        self._resolver = resolver
        self._notify = notify
        self._read = read
        self._deployments = KeyedLoops[ReportSource, _Deployment](_Deployment, self._run, "providers")

    def report(self, key: Hashable) -> ProviderReport | None:
        """The latest report of a deployment (None: nothing read since it was tracked)."""
        tracked = self._deployments.get(key)
        return tracked.report if tracked else None

    def track(self, key: Hashable, source: ReportSource | None) -> None:
        """Read `key`'s report from `source` from now on; None stops and forgets it."""
        self._deployments.track(key, source)

    async def stop(self) -> None:
        """Stop every reading task."""
        await self._deployments.stop()

    async def _run(self, key: Hashable, tracked: _Deployment) -> None:
        while True:
            source = tracked.target
            try:
                report = await self._read(
                    self._resolver.resolve(source.url), source.deployment, source.time_limit
                )
                if report != tracked.report:
                    tracked.report = report
                    self._notify(key)
            except Exception:  # reading never takes the operator down; the next round retries
                log.exception("reading the provider checks of %s failed", key)
            checks = tracked.report.checks if tracked.report is not None else None
            complete = checks is not None and len(checks) >= source.expected
            await tracked.pause(source.interval if complete else min(source.interval, INCOMPLETE_RETRY))
