"""When each deployment's ServiceMonitors were last listed, and whether their CRD existed.

ServiceMonitors are optional (the Prometheus Operator's CRD may be missing) and not watched. One
list request answers both questions; it is made once per generation of the deployment, and again
every `recheck` seconds while the CRD is missing, not on every agent status change that
reconciles the deployment.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MonitoringCheck:
    """The last look for a deployment's ServiceMonitors."""

    generation: int
    at: float
    present: bool
    """Whether the ServiceMonitor CRD existed."""


class MonitoringChecks:
    """(namespace, deployment) → its last `MonitoringCheck`."""

    def __init__(self, recheck: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._recheck = recheck
        self._clock = clock
        self._checks: dict[tuple[str, str], MonitoringCheck] = {}

    def known(self, namespace: str, deployment: str, generation: int) -> bool | None:
        """Whether the CRD exists, as found for this generation; None when it must be listed again."""
        last = self._checks.get((namespace, deployment))
        if last is None or last.generation != generation:
            return None
        if last.present or self._clock() - last.at < self._recheck:
            return last.present
        return None

    def record(self, namespace: str, deployment: str, generation: int, *, present: bool) -> None:
        """What a listing for this generation found."""
        self._checks[(namespace, deployment)] = MonitoringCheck(generation, self._clock(), present)

    def forget(self, namespace: str, deployment: str) -> None:
        """The deployment is gone."""
        self._checks.pop((namespace, deployment), None)
