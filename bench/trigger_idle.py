"""Idle schedule triggers: the memory and the status writes of N triggers waiting for their time.

    .venv/bin/python bench/trigger_idle.py [--triggers 1000] [--seconds 5]

Each trigger gets what the operator gives a Ready schedule trigger: a run engine
(`pallas_io.triggers.runs`) and a schedule loop (`pallas_io.triggers.clock`), weekday mornings in
Paris, so none fires while measured. Reports the resident memory they add (after a collection)
and how many status changes they make: one each at start (its `nextRunTime`), and none while
idle, which is what the operator writes to the API server. The operator's own records of the
objects (its world) are not included. Target (issue 52): 1,000 idle triggers add at most 50 MB
and no API writes between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from pallas_api.spec import PallasTriggerSpec
from pallas_io.triggers.clock import run_schedule
from pallas_io.triggers.metrics import trigger_metrics
from pallas_io.triggers.runs import TriggerEngine, TriggerTarget

SPEC = {
    "agent": "reporter",
    "message": "Morning report, run {{ .run.id }}",
    "schedule": {"cron": "0 7 * * 1-5", "timeZone": "Europe/Paris"},
}


def rss_mb() -> float:
    """This process's resident memory in MiB."""
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def measure(count: int, seconds: float) -> None:
    """Start `count` triggers, wait, and print the figures."""
    metrics = trigger_metrics(CollectorRegistry())
    changes = 0

    def changed(_: object) -> None:
        nonlocal changes
        changes += 1

    gc.collect()
    before = rss_mb()
    stop = asyncio.Event()
    started = datetime.now(UTC)
    tasks = []
    for index in range(count):
        target = TriggerTarget(
            "bench", f"t{index}", PallasTriggerSpec.model_validate(SPEC), "http://agent/mcp"
        )
        engine = TriggerEngine(target, metrics, on_change=changed)
        tasks.append(asyncio.create_task(run_schedule(engine, stop, started)))
    await asyncio.sleep(1.0)
    at_start = changes
    await asyncio.sleep(seconds)
    gc.collect()
    added = rss_mb() - before
    print(
        f"{count} idle schedule triggers: +{added:.1f} MiB resident; status changes: {at_start} at "
        f"start, {changes - at_start} in {seconds:g} s idle"
    )
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def main() -> None:
    """Parse the flags and measure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(measure(args.triggers, args.seconds))


if __name__ == "__main__":
    main()
