"""How many pods a scaled agent wants now, and whether it sleeps (issue 53; docs/operator.md "Scaling").

Pure: from what the agent's pods report (the last time one started a turn, the turns each ready
pod has in flight), the replicas the Deployment has, the last change and the clock, `decide`
says the replicas to set and the phase. The operator's loop gathers the inputs and applies the
answer (`reconcile.scaling`); the activator wakes a sleeping agent by itself and reports the
wake as activity, so a woken agent is not put back to sleep before its first turn ends.

The rules:
- Idle (no turn in flight and none started for `idleSeconds`): `minReplicas`; with 0 the agent
  sleeps (phase `Sleeping`).
- Awake: enough pods for `targetInFlight` turns each (rounded up), at least `minReplicas` and 1,
  at most `maxReplicas`. Up at once: load waits for no one.
- Down one pod at a time, and only `SCALE_IN_STABLE_SECONDS` after the last change: a burst's end
  does not remove the pods its next burst needs. A removed pod drains as in a rollout (day-2): not
  ready, new sessions refused, its turns in flight finish within `drainSeconds`; so scale-in never
  loses a turn. Going to sleep is a scale-in like any other, so it waits for the same rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from pallas_api.spec.common import ScalingSpec

SCALE_IN_STABLE_SECONDS = 60.0
"""Seconds after the last change of replicas before one pod may be removed."""


@dataclass(frozen=True, slots=True)
class Activity:
    """What an agent's pods report.

    `last_turn_at`: wall-clock seconds of the latest turn any pod started, or of a wake (None:
    none known); `in_flight`: the turns each ready pod runs, one entry a pod.
    """

    last_turn_at: float | None
    in_flight: tuple[int, ...] = ()


class Decision(NamedTuple):
    """The replicas to set, whether the agent sleeps, and why (for the log and the Event)."""

    replicas: int
    sleeping: bool
    reason: str


def decide(
    scaling: ScalingSpec, activity: Activity, replicas: int, changed_at: float | None, now: float
) -> Decision:
    """The replicas a scaled agent wants at `now`.

    Args:
        scaling: The agent's `scaling` (its own or its deployment's).
        activity: What its pods report.
        replicas: The replicas its Deployment has now.
        changed_at: When the loop last changed them (None: never, or not since the operator started).
        now: Wall-clock seconds.
    """
    in_flight = sum(activity.in_flight)
    quiet = activity.last_turn_at is None or now - activity.last_turn_at >= scaling.idle_seconds
    if replicas == 0 and (quiet or activity.last_turn_at is None):
        return Decision(0, True, "asleep; the activator wakes it at the next request")
    if in_flight == 0 and quiet:
        wanted = scaling.min_replicas
        reason = f"no turn for {scaling.idle_seconds}s (idleSeconds)"
    else:
        need = math.ceil(in_flight / scaling.target_in_flight)
        wanted = min(max(need, scaling.min_replicas, 1), scaling.max_replicas)
        reason = f"{in_flight} turn(s) in flight, {scaling.target_in_flight} per pod (targetInFlight)"
    if wanted >= replicas:
        return Decision(wanted, wanted == 0, reason)
    if changed_at is not None and now - changed_at < SCALE_IN_STABLE_SECONDS:
        return Decision(
            replicas,
            False,
            f"{reason}; holding {replicas} until {SCALE_IN_STABLE_SECONDS:g}s after the last change",
        )
    return Decision(replicas - 1, replicas - 1 == 0, f"{reason}; one pod fewer (it drains its turns first)")
