"""Triggers hosted by one process (`pallas run`): a loop per schedule, one webhook listener.

Each run's outcome is logged as it ends (the process keeps no status: it has no API server to
write to) and counted in the process's metrics. Stopping cancels the schedule loops and the
runs in flight; those are logged failed (`Interrupted`), never run again by this process.

`update` takes the triggers of edited manifests (`pallas run --reload`): an unchanged trigger
keeps its engine, its loop and its runs in flight; a removed one stops as at the end; a changed
one stops so and starts again as new (a run of the old spec never overlaps one of the new, which
`Forbid` would not allow). A new or changed schedule counts from the edit: no missed run of the
time before it is made up.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pallas_io.serving import listen, serve
from pallas_io.triggers.clock import run_schedule
from pallas_io.triggers.runs import TriggerEngine, TriggerTarget
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.triggers.webhook import PATH, WebhookEndpoint, WebhookTrigger

GRACE_SECONDS = 2


@dataclass(frozen=True, slots=True)
class TriggerChanges:
    """What `update` did, by trigger key (`<namespace>/<name>`)."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """`triggers added a; changed b`, or "" when nothing changed."""
        kinds = (("added", self.added), ("changed", self.changed), ("removed", self.removed))
        parts = [f"{what} {', '.join(keys)}" for what, keys in kinds if keys]
        return f"triggers {'; '.join(parts)}" if parts else ""


class TriggerHost:
    """The schedule loops and the webhook endpoint of a process's triggers."""

    def __init__(
        self, schedules: Sequence[TriggerTarget], webhooks: Sequence[WebhookTrigger], metrics: RuntimeMetrics
    ) -> None:
        self._metrics = metrics
        self.schedule_engines = [TriggerEngine(t, metrics.triggers) for t in schedules]
        self.webhook_engines = [(w, TriggerEngine(w.target, metrics.triggers)) for w in webhooks]
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._loops: dict[str, asyncio.Task[None]] = {}
        """Each schedule trigger's loop, by key."""
        self._sock: socket.socket | None = None
        self._endpoint = WebhookEndpoint(self.webhook_engines)
        self._address: tuple[str, int] | None = None

    def engines(self) -> list[TriggerEngine]:
        """Every trigger's engine."""
        return [*self.schedule_engines, *(engine for _, engine in self.webhook_engines)]

    async def start(self, host: str, port: int) -> str | None:
        """Start the schedule loops, and the webhook listener on `host:port` if there are webhooks.

        Returns:
            The webhook URL pattern, or None without webhook triggers.

        Raises:
            OSError: the port cannot be listened on.
        """
        started_at = datetime.now(UTC)
        for engine in self.schedule_engines:
            self._loop(engine, started_at)
        self._address = (host, port)
        if not self.webhook_engines:
            return None
        return await self._listen()

    def _loop(self, engine: TriggerEngine, started_at: datetime) -> None:
        self._loops[engine.target.key] = asyncio.create_task(run_schedule(engine, self._stop, started_at))

    async def _listen(self) -> str:
        assert self._address is not None
        host, port = self._address
        self._sock = listen(host, port)
        started = asyncio.Event()
        app = self._endpoint.app()
        server = asyncio.create_task(serve(app, self._sock, started=started, graceful_timeout=GRACE_SECONDS))
        self._tasks.append(server)
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait([server, waiter], return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            waiter.cancel()
            self._sock.close()
            self._sock = None
            raise OSError(f"the webhook listener on {host}:{port} did not start: {server.exception()}")
        return f"http://{host}:{port}{PATH.replace('{namespace}', '<namespace>').replace('{name}', '<name>')}"

    async def update(
        self, schedules: Sequence[TriggerTarget], webhooks: Sequence[WebhookTrigger]
    ) -> TriggerChanges:
        """Run these triggers from now on instead of the current ones (see the module's docstring).

        Raises:
            OSError: webhook triggers came, none ran before, and the listener cannot start.
        """
        changes = TriggerChanges()
        now = datetime.now(UTC)
        wanted = {t.key: t for t in schedules}
        kept: list[TriggerEngine] = []
        for engine in self.schedule_engines:
            key = engine.target.key
            if wanted.get(key) == engine.target:
                kept.append(engine)
                continue
            (changes.changed if key in wanted else changes.removed).append(key)
            await self._stop_engine(engine, self._loops.pop(key, None))
        running = {e.target.key for e in kept}
        for key, target in wanted.items():
            if key not in running:
                engine = TriggerEngine(target, self._metrics.triggers)
                kept.append(engine)
                self._loop(engine, now)
                if key not in changes.changed:
                    changes.added.append(key)
        self.schedule_engines = kept
        hooks = {w.target.key: w for w in webhooks}
        kept_hooks: list[tuple[WebhookTrigger, TriggerEngine]] = []
        for webhook, engine in self.webhook_engines:
            key = webhook.target.key
            if hooks.get(key) == webhook:
                kept_hooks.append((webhook, engine))
                continue
            (changes.changed if key in hooks else changes.removed).append(key)
            await self._stop_engine(engine, None)
        present = {w.target.key for w, _ in kept_hooks}
        for key, webhook in hooks.items():
            if key not in present:
                kept_hooks.append((webhook, TriggerEngine(webhook.target, self._metrics.triggers)))
                if key not in changes.changed:
                    changes.added.append(key)
        self.webhook_engines = kept_hooks
        self._endpoint.route(kept_hooks)
        if kept_hooks and self._sock is None and self._address is not None:
            await self._listen()
        return changes

    @staticmethod
    async def _stop_engine(engine: TriggerEngine, loop: asyncio.Task[None] | None) -> None:
        if loop is not None:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
        with contextlib.suppress(Exception):
            await engine.close()

    async def close(self) -> None:
        """Stop the loops, the listener and the runs in flight."""
        self._stop.set()
        tasks = [*self._tasks, *self._loops.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for engine in self.engines():
            with contextlib.suppress(Exception):
                await engine.close()
        if self._sock is not None:
            self._sock.close()
