"""The running operator's shared state: the cluster, the world, the queue, the prober, metrics."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, cast

from pallas_io import tracing
from pallas_operator.engine.delegations import Delegations
from pallas_operator.engine.monitoring_checks import MonitoringChecks
from pallas_operator.engine.prober import ProbeAccess, Prober
from pallas_operator.engine.provider_reports import ProviderReports
from pallas_operator.engine.queue import WorkQueue
from pallas_operator.engine.scaler import Scaler, ScaleTarget
from pallas_operator.engine.startup import StartupTracker
from pallas_operator.engine.triggers import TriggerRunners
from pallas_operator.engine.world import World
from pallas_operator.k8s.apply import Applier
from pallas_operator.k8s.cluster import Cluster
from pallas_operator.k8s.tokens import ProbeTokens
from pallas_operator.metrics import OperatorMetrics
from pallas_operator.settings import OperatorSettings

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

AGENT = "agent"
DEPLOYMENT = "deployment"
TRIGGER = "trigger"
Key = tuple[str, str, str]
"""(AGENT | DEPLOYMENT | TRIGGER, namespace, name)"""


def key_fields(key: Hashable) -> dict[str, str]:
    """The log fields of a reconcile: `agent` or `deployment`, and `namespace`."""
    kind, namespace, name = cast(Key, key)
    return {kind: name, "namespace": namespace}


def now() -> str:
    """The current time as Kubernetes writes it (RFC 3339, seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Operator:
    """Everything the kopf wiring and the reconciles share, for one operator run."""

    def __init__(
        self,
        settings: OperatorSettings,
        cluster: Cluster,
        metrics: OperatorMetrics,
        reconcilers: Mapping[str, Callable[[Operator, str, str], Awaitable[float | None]]],
        ready: threading.Event | None = None,
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        """Every API request goes through it: the lightkube adapter when running, a fake in unit tests."""
        self.world = World()
        self.metrics = metrics
        self.applier = Applier(cluster, on_write=self.metrics.count_write)
        self.tokens = ProbeTokens(cluster)
        self.prober = Prober(settings.resolver, notify=self._probed, credentials=self._probe_token)
        self.provider_reports = ProviderReports(settings.resolver, notify=self._probed)
        self.scaler = Scaler(
            cluster, self.deployment_replicas, notify=self._probed, on_write=self.metrics.count_write
        )
        """The scaling loops of the agents whose `scaling` applies (`reconcile.scaling` tracks them)."""
        self.queue = WorkQueue(self._reconcile, workers=settings.workers, fields=key_fields)
        self.metrics.queue_depth.set_function(lambda: self.queue.depth)
        # The queue starts once the world holds every object that existed at start-up.
        self.startup = StartupTracker(
            metrics, ready or threading.Event(), settings.stall_after, on_ready=self.queue.start
        )
        # What the reconciles remember between runs, each in a tracker of its own.
        self.monitoring_checks = MonitoringChecks(settings.monitoring_recheck)
        self.delegations = Delegations()
        self.unauthenticated_warned: dict[tuple[str, str], str] = {}
        """(namespace, deployment) → uid of the deployment the Unauthenticated Warning was posted
        for: two reconciles can both see the status from before the first one's write."""
        self.triggers = TriggerRunners(cluster, metrics.triggers, namespaces=settings.namespaces)
        """The PallasTriggers this operator fires (`reconcile.trigger` decides which)."""
        self.reconcilers = dict(reconcilers)
        """Kind → its reconcile (the reconciles live above the engine, so they are handed in)."""

    def enqueue(self, kind: str, namespace: str, name: str, delay: float = 0.0) -> None:
        """Ask for a reconcile of one resource (after `delay` s); repeated asks collapse into one."""
        self.queue.add((kind, namespace, name), delay)

    def _probed(self, key: Hashable) -> None:
        self.queue.add(key)

    def deployment_replicas(self, target: ScaleTarget) -> int | None:
        """The replicas of a scaled agent's Deployment as the watch last showed it."""
        child = self.world.children(target.namespace, target.uid).get(("Deployment", target.name))
        return child.workload.replicas if child is not None and child.workload is not None else None

    async def _probe_token(self, access: ProbeAccess) -> str:
        return await self.tokens.token(access.namespace, access.service_account, access.auth.audiences)

    async def _reconcile(self, key: Hashable) -> float | None:
        kind, namespace, name = cast(Key, key)
        started = time.perf_counter()
        outcome = "error"
        attributes = {"pallas.kind": kind, "k8s.namespace.name": namespace, "pallas.object.name": name}
        with tracing.span(f"reconcile {kind}", attributes=attributes):
            try:
                again = await self.reconcilers[kind](self, namespace, name)
                outcome = "ok"
                return again
            finally:
                self.metrics.reconciles.labels(kind=kind, outcome=outcome).inc()
                self.metrics.duration.labels(kind=kind).observe(
                    time.perf_counter() - started, tracing.exemplar()
                )

    async def close(self) -> None:
        """Stop the work queue, every probe task and every scaling loop."""
        await self.queue.stop()
        await self.triggers.close()
        await self.prober.stop()
        await self.provider_reports.stop()
        await self.scaler.stop()
