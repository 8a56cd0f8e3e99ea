"""What a process that takes over a trigger does with the runs another process left `Running`.

A run is recorded `Running` before its call starts (`status.runs`), so a process that stops
mid-run leaves that record behind. The next process to run the trigger (an operator after a
restart, or a new leader) cannot know whether the agent finished the turn, and running it again
could act twice (a report sent twice, a ticket filed twice). So each such run is closed as
`Failed` with reason `Interrupted`, and the schedule carries on from `lastScheduleTime`: the
interrupted time is not run again, later missed times follow CronJob's rules.
"""

from __future__ import annotations

from collections.abc import Collection

from pallas_api.status import PallasTriggerStatus

INTERRUPTED = "Interrupted"
INTERRUPTED_MESSAGE = (
    "the process running it stopped before the agent answered; not run again (the agent may have "
    "finished the turn: see its conversation)"
)


def settle_interrupted(
    status: PallasTriggerStatus, in_flight: Collection[str], now: str
) -> PallasTriggerStatus:
    """`status` with every `Running` run that is not `in_flight` here closed as Interrupted at `now`."""
    runs = [
        run.model_copy(
            update={
                "outcome": "Failed",
                "reason": INTERRUPTED,
                "message": INTERRUPTED_MESSAGE,
                "completion_time": now,
            }
        )
        if run.outcome == "Running" and run.id not in in_flight
        else run
        for run in status.runs
    ]
    return status.model_copy(update={"runs": runs})
