"""The scaling loop: sizes each agent whose `scaling` applies from what its pods report (issue 53).

One task per scaled agent (`KeyedLoops`, as the prober's). Every `min(idleSeconds / 10, 30 s)` it
reads the turns in flight and the last turn's time off each ready pod's `/metrics`
(`pod_activity`), asks the pure policy (`status.scaling.decide_awake`) and, when the replicas
differ, writes them through the `Cluster` seam under the loop's own field manager, with a log
line and an Event giving the policy's reason. A decision for a new count (and the first) asks
for a reconcile of the agent, which puts the count and its reason into `status.scaling`.

The operator's own loop, not a HorizontalPodAutoscaler: docs/operator.md "Scaling" says why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from pallas_api import names
from pallas_api.spec.common import ScalingSpec
from pallas_operator.builders.meta import agent_selector
from pallas_operator.engine.loops import KeyedLoops, Looping
from pallas_operator.engine.pod_activity import READ_TIME_LIMIT, ReadPod, metrics_url, read_pod
from pallas_operator.k8s.cluster import Cluster, OwnerEvent
from pallas_operator.status.scaling import Decision, decide_awake

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScaleTarget:
    """One scaled agent: where its pods are and the scaling that applies to it.

    A change of any field (an edit of the scaling, a new port) wakes its loop at once.
    """

    namespace: str
    name: str
    uid: str
    """Its PallasAgent's (the owner of its Deployment in the world, the object of its Events)."""
    port: int
    """The agent container's port (its MCP endpoint and `/metrics`)."""
    scaling: ScalingSpec

    @property
    def interval(self) -> float:
        """Seconds between two rounds: a tenth of `idleSeconds`, at most `LONGEST_ROUND`."""
        return min(self.scaling.idle_seconds / 10, LONGEST_ROUND)


LONGEST_ROUND = 30.0
"""Seconds between two readings at most, whatever `idleSeconds` is: load waits no longer."""
SCALED_REASON = "Scaled"
"""The Event reason of every change of replicas the loop makes."""


@dataclass
class _Scaled(Looping[ScaleTarget]):
    changed_at: float | None = None
    """Wall-clock seconds of the loop's last change of replicas (None: none since start)."""
    decision: Decision | None = None
    """The decision that set the replicas wanted now (the status's), not every round's."""


Replicas = Callable[[ScaleTarget], "int | None"]
"""The replicas the agent's Deployment has now (as the watch shows it); None: no Deployment yet."""


class Scaler(KeyedLoops[ScaleTarget, _Scaled]):
    """The scaling loops of every agent whose `scaling` applies, by key.

    `track(key, target)` sizes an agent from now on; `track(key, None)` stops its loop (fixed
    size, deleted, refused, no Deployment yet); `stop()` ends them all.
    """

    def __init__(
        self,
        cluster: Cluster,
        replicas: Replicas,
        notify: Callable[[Hashable], None],
        read: ReadPod = read_pod,
        clock: Callable[[], float] = time.time,
        on_write: Callable[[str, str], None] | None = None,
    ) -> None:
        super().__init__(_Scaled, self._run, "scale")
        self._cluster, self._replicas, self._notify = cluster, replicas, notify
        self._read, self._clock, self._on_write = read, clock, on_write

    def decision(self, key: Hashable) -> Decision | None:
        """The decision behind the replicas the loop wants now (None: not scaled, or no round yet)."""
        agent = self.get(key)
        return agent.decision if agent else None

    def running(self, key: Hashable) -> bool:
        """Whether a loop sizes `key`."""
        return self.get(key) is not None

    async def round(self, key: Hashable) -> Decision | None:
        """One reading and decision for `key` (its loop's step; tests call it with a fake clock)."""
        agent = self.get(key)
        if agent is None:
            return None
        target = agent.target
        current = self._replicas(target)
        if current is None:
            return None
        ips = await self._cluster.ready_pod_ips(target.namespace, agent_selector(target.name))
        readings = await asyncio.gather(
            *(self._read(metrics_url(ip, target.port), READ_TIME_LIMIT) for ip in ips)
        )
        now = self._clock()
        decision = decide_awake(target.scaling, readings, current, agent.changed_at, now)
        if decision.replicas != current:
            await self._scale(target, current, decision)
            agent.changed_at = now
        # Only a new count (or the first) goes to the status: the turns in flight change every
        # round under load, and a status write each round for each busy agent would be the cost.
        if agent.decision is None or decision.replicas != agent.decision.replicas:
            agent.decision = decision
            self._notify(key)
        return decision

    async def _scale(self, target: ScaleTarget, current: int, decision: Decision) -> None:
        await self._cluster.scale(target.namespace, target.name, decision.replicas)
        message = f"{current} → {decision.replicas} pods: {decision.reason}"
        log.info("scaled agent %s/%s: %s", target.namespace, target.name, message)
        event = OwnerEvent(
            names.AGENT_KIND, target.namespace, target.name, target.uid, SCALED_REASON, message, warning=False
        )
        await self._cluster.post_event(event)
        if self._on_write is not None:
            self._on_write("Deployment", "scale")
            self._on_write(names.AGENT_KIND, "event")

    async def _run(self, key: Hashable, agent: _Scaled) -> None:
        while True:
            try:
                await self.round(key)
            except Exception:  # a round never takes the operator down; the next one retries
                log.exception("scaling %s failed", key)
            await agent.pause(agent.target.interval)
