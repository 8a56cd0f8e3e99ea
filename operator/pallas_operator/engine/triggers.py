"""The PallasTriggers this operator fires: a run engine each, and a schedule loop or an event watch.

A schedule trigger gets a loop of its own; an event trigger joins the watch of its kind
(`engine.event_watches`, shared by every trigger on that kind). The reconcile
(`reconcile.trigger`) decides whether a trigger fires and hands it here; each change of
its status (a run recorded, a run ended, the next time planned) is written through the
`Cluster` seam, the newest one only when writes queue up. Each run is recorded `Running`
(written) before its call starts, and an operator that starts finds the runs a predecessor left
`Running` and closes them `Interrupted` (`pallas_api.triggers.restart`): a run is never made
twice. The schedule goes on from `status.lastScheduleTime`, so times missed while no operator
ran follow CronJob's rules (the newest within `startingDeadlineSeconds` runs once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pallas_api import names
from pallas_api.status import PallasTriggerStatus, TriggerRun
from pallas_io.triggers.call import call_agent
from pallas_io.triggers.clock import run_schedule
from pallas_io.triggers.metrics import TriggerMetrics
from pallas_io.triggers.runs import AgentCall, TriggerEngine, TriggerTarget
from pallas_operator.engine.event_watches import EventWatches
from pallas_operator.k8s.cluster import Cluster, OwnerEvent

log = logging.getLogger(__name__)
TriggerKey = tuple[str, str]
"""(namespace, name)"""


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 time as Kubernetes writes it; None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


@dataclass
class _Fired:
    engine: TriggerEngine
    generation: int
    uid: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    loop: asyncio.Task[None] | None = None
    pending: PallasTriggerStatus | None = None
    writer: asyncio.Task[None] | None = None


class TriggerRunners:
    """Every trigger this operator fires, keyed by (namespace, name)."""

    def __init__(
        self,
        cluster: Cluster,
        metrics: TriggerMetrics,
        call: AgentCall | None = None,
        namespaces: Sequence[str] = (),
    ) -> None:
        self._cluster = cluster
        self._metrics = metrics
        self._call = call
        self._fired: dict[TriggerKey, _Fired] = {}
        self.watches = EventWatches(cluster, namespaces)
        """The event watches (`namespaces`: the operator's, empty for all: one watch per kind)."""

    def engine(self, key: TriggerKey) -> TriggerEngine | None:
        """The engine of a trigger that fires, or None."""
        fired = self._fired.get(key)
        return fired.engine if fired is not None else None

    async def fire(
        self,
        target: TriggerTarget,
        status: PallasTriggerStatus,
        *,
        generation: int,
        uid: str,
        created: datetime,
    ) -> TriggerEngine:
        """Fire `target` on its schedule or its events from now on (restarted when its generation changed).

        `status` is the trigger's as stored: its runs left Running are closed, and its
        `lastScheduleTime` is where missed times are counted from.
        """
        key = (target.namespace, target.name)
        fired = self._fired.get(key)
        if fired is not None and fired.generation == generation:
            # The agent moved, or its deployment's auth changed: the next run follows.
            fired.engine.target.agent_url = target.agent_url
            fired.engine.target.credentials = target.credentials
            return fired.engine
        if fired is not None:
            status = fired.engine.status  # the newest, with the runs it made
            await self.stop(key)
        engine = self._engine(target, status, key, uid)
        fired = _Fired(engine, generation, uid)
        self._fired[key] = fired
        if target.spec.event is not None:
            self.watches.subscribe(key, engine, target.spec.event)
            return engine
        last = parse_time(engine.status.last_schedule_time)
        fired.loop = asyncio.create_task(
            run_schedule(engine, fired.stop, created, last), name=f"trigger {key}"
        )
        return engine

    def _engine(
        self, target: TriggerTarget, status: PallasTriggerStatus, key: TriggerKey, uid: str
    ) -> TriggerEngine:
        return TriggerEngine(
            target,
            self._metrics,
            on_change=lambda new: self._write(key, new),
            on_run_end=lambda run: self._announce(key, uid, run),
            call=self._call or call_agent,
            status=status,
        )

    def publish(self, key: TriggerKey) -> None:
        """Write a firing trigger's status as its engine has it (the API's copy is older)."""
        fired = self._fired.get(key)
        if fired is not None:
            self._write(key, fired.engine.status)

    def _write(self, key: TriggerKey, status: PallasTriggerStatus) -> None:
        """Write the newest status; one write at a time per trigger, the newest wins."""
        fired = self._fired.get(key)
        if fired is None:
            return
        fired.pending = status
        if fired.writer is None or fired.writer.done():
            fired.writer = asyncio.create_task(self._drain(key, fired))

    async def _drain(self, key: TriggerKey, fired: _Fired) -> None:
        while fired.pending is not None:
            status, fired.pending = fired.pending, None
            try:
                await self._cluster.write_status(names.TRIGGER_KIND, *key, status.to_wire())
            except Exception as exc:  # noqa: BLE001 - any failure: the next change writes again
                log.warning("writing the status of PallasTrigger %s/%s failed: %s", *key, exc)

    def _announce(self, key: TriggerKey, uid: str, run: TriggerRun) -> None:
        failed = run.outcome == "Failed"
        message = f"run {run.id} {run.outcome.lower()}" + (
            f" ({run.reason}): {run.message}" if failed else ""
        )
        event = OwnerEvent(
            names.TRIGGER_KIND,
            key[0],
            key[1],
            uid,
            "RunFailed" if failed else "RunSucceeded",
            message,
            failed,
        )
        task = asyncio.create_task(self._cluster.post_event(event))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def stop(self, key: TriggerKey) -> PallasTriggerStatus | None:
        """Stop firing a trigger: its loop ends, its runs in flight are closed Interrupted.

        Returns:
            Its last status (those runs closed), or None when it was not firing.
        """
        fired = self._fired.get(key)
        if fired is None:
            return None
        fired.stop.set()
        await self.watches.unsubscribe(key)
        if fired.loop is not None:
            fired.loop.cancel()
            await asyncio.gather(fired.loop, return_exceptions=True)
        await fired.engine.close()  # the interrupted runs are recorded and written below
        if fired.writer is not None:
            with contextlib.suppress(Exception):
                await fired.writer
        self._fired.pop(key, None)
        return fired.engine.status

    async def close(self) -> None:
        """Stop every trigger (the operator stops)."""
        for key in list(self._fired):
            await self.stop(key)
