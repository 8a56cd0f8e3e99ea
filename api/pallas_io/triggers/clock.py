"""The loop of a schedule trigger: plan, fire what is due, sleep until the next time.

Missed times follow CronJob's rules (`pallas_api.triggers.schedule.plan_runs`). `created` is
where counting starts when nothing ran yet: the trigger's creation in a cluster, the start of
the process under `pallas run` (which keeps no state between runs, so it never catches up).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from pallas_api.triggers.schedule import parse_schedule, plan_runs
from pallas_io.triggers.runs import TriggerEngine


async def run_schedule(
    engine: TriggerEngine, stop: asyncio.Event, created: datetime, last: datetime | None = None
) -> None:
    """Fire `engine`'s trigger on its schedule until `stop` is set."""
    spec = engine.target.spec
    assert spec.schedule is not None  # only schedule triggers get a loop
    schedule = parse_schedule(spec.schedule.cron, spec.schedule.time_zone)
    while not stop.is_set():
        now = datetime.now(UTC)
        plan = plan_runs(
            schedule, last=last, created=created, now=now, deadline_seconds=spec.starting_deadline_seconds
        )
        engine.planned(plan.handled, plan.next, plan.skipped)
        last = plan.handled or last
        if plan.due is not None:
            await engine.fire({}, scheduled=plan.due)
        wait = (plan.next - datetime.now(UTC)).total_seconds()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(wait, 0.0))
