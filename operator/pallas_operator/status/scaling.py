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
from collections.abc import Sequence
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


@dataclass(frozen=True, slots=True)
class PodReading:
    """What one ready pod's `/metrics` says: its turns in flight, when it last started one."""

    in_flight: int
    last_turn_at: float | None


NO_ACTIVATOR = "minReplicas 0 is held at 1 until the activator that wakes a sleeping agent exists"


def decide_awake(
    scaling: ScalingSpec,
    readings: Sequence[PodReading | None],
    replicas: int,
    changed_at: float | None,
    now: float,
) -> Decision:
    """`decide` for the operator's loop as built today: never to sleep, never in on a silent pod.

    Nothing wakes a sleeping agent yet (the activator is not built), so `minReplicas: 0` counts
    as 1 and an agent never goes to 0 pods. A pod that did not answer (None in `readings`) is
    unknown, never idle: its turns may be what keeps the agent busy, so the loop then adds pods
    when the others ask for it but removes none.
    """
    known = [r for r in readings if r is not None]
    turns = [r.last_turn_at for r in known if r.last_turn_at is not None]
    activity = Activity(max(turns, default=None), tuple(r.in_flight for r in known))
    awake = scaling.model_copy(update={"min_replicas": max(scaling.min_replicas, 1)})
    decision = decide(awake, activity, replicas, changed_at, now)
    if decision.replicas < 1:  # a Deployment someone put at 0: back to one pod
        decision = Decision(1, False, f"no pod running; {awake.min_replicas} kept (minReplicas)")
    silent = len(readings) - len(known)
    if silent and decision.replicas < replicas:
        decision = Decision(
            replicas, False, f"{decision.reason}; holding {replicas}: {silent} pod(s) did not answer /metrics"
        )
    if scaling.min_replicas == 0:
        decision = decision._replace(reason=f"{decision.reason}; {NO_ACTIVATOR}")
    return decision
