"""Triggers hosted by one process (`pallas run`): a loop per schedule, one webhook listener.

Each run's outcome is logged as it ends (the process keeps no status: it has no API server to
write to) and counted in the process's metrics. Stopping cancels the schedule loops and the
runs in flight; those are logged failed (`Interrupted`), never run again by this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Sequence
from datetime import UTC, datetime

from pallas_io.serving import listen, serve
from pallas_io.triggers.clock import run_schedule
from pallas_io.triggers.runs import TriggerEngine, TriggerTarget
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.triggers.webhook import PATH, WebhookEndpoint, WebhookTrigger

GRACE_SECONDS = 2


class TriggerHost:
    """The schedule loops and the webhook endpoint of a process's triggers."""

    def __init__(
        self, schedules: Sequence[TriggerTarget], webhooks: Sequence[WebhookTrigger], metrics: RuntimeMetrics
    ) -> None:
        self.schedule_engines = [TriggerEngine(t, metrics.triggers) for t in schedules]
        self.webhook_engines = [(w, TriggerEngine(w.target, metrics.triggers)) for w in webhooks]
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._sock: socket.socket | None = None

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
            self._tasks.append(asyncio.create_task(run_schedule(engine, self._stop, started_at)))
        if not self.webhook_engines:
            return None
        self._sock = listen(host, port)
        started = asyncio.Event()
        app = WebhookEndpoint(self.webhook_engines).app()
        server = asyncio.create_task(serve(app, self._sock, started=started, graceful_timeout=GRACE_SECONDS))
        self._tasks.append(server)
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait([server, waiter], return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            waiter.cancel()
            raise OSError(f"the webhook listener on {host}:{port} did not start: {server.exception()}")
        return f"http://{host}:{port}{PATH.replace('{namespace}', '<namespace>').replace('{name}', '<name>')}"

    async def close(self) -> None:
        """Stop the loops, the listener and the runs in flight."""
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for engine in self.engines():
            with contextlib.suppress(Exception):
                await engine.close()
        if self._sock is not None:
            self._sock.close()
