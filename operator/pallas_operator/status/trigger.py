"""A PallasTrigger's conditions (pure): Accepted (its spec and agent) and Ready (it will fire).

The runs and schedule fields of its status are the run engine's (`pallas_io.triggers.runs`);
this policy adds the conditions around them, so one status carries both.
"""

from __future__ import annotations

from dataclasses import dataclass

from pallas_api import conditions
from pallas_api.status import PallasTriggerStatus
from pallas_operator.status.conditions import ACCEPTED, READY, Verdict, false, stamp, true


@dataclass(frozen=True, slots=True)
class TriggerObservation:
    """What the reconcile saw of one trigger."""

    generation: int
    problem: str | None
    """Why its spec cannot be read (a validation error, in the user's words); None when it can."""
    source: str = "schedule"
    agent: str = ""
    agent_found: bool = False
    agent_url: str | None = None
    """The agent's MCP URL from its status; None until it has one."""
    suspend: bool = False
    event_problem: str | None = None
    """Why the operator may not watch an event trigger's kind (or namespace); None when it may."""
    watched: str = ""
    """What an event trigger watches, for its Ready message (`pods in team-a`)."""


def trigger_verdicts(seen: TriggerObservation) -> list[Verdict]:
    """Accepted, then Ready."""
    if seen.problem is not None:
        accepted = false(ACCEPTED, conditions.INVALID_SPEC, seen.problem)
    elif seen.event_problem is not None:
        accepted = false(ACCEPTED, conditions.EVENT_KIND_NOT_ALLOWED, seen.event_problem)
    elif not seen.agent_found:
        message = f"PallasAgent {seen.agent!r} not found in this namespace"
        accepted = false(ACCEPTED, conditions.AGENT_NOT_FOUND, message)
    else:
        accepted = true(ACCEPTED, conditions.ACCEPTED_REASON)
    return [accepted, _ready(seen, accepted)]


def _ready(seen: TriggerObservation, accepted: Verdict) -> Verdict:
    if not accepted.true:
        return false(READY, conditions.NOT_ACCEPTED, accepted.message)
    if seen.source == "webhook":
        message = (
            "webhook triggers are not served by this version of the operator; `pallas run` runs "
            "them (docs/triggers.md)"
        )
        return false(READY, conditions.SOURCE_NOT_RUN, message)
    if seen.suspend:
        return false(READY, conditions.SUSPENDED, "spec.suspend is true: nothing fires")
    if seen.agent_url is None:
        return false(READY, conditions.AGENT_NOT_READY, f"PallasAgent {seen.agent!r} has no URL yet")
    if seen.source == "event":
        return true(READY, conditions.WATCHING, f"watches {seen.watched}; runs call {seen.agent_url}")
    return true(READY, conditions.SCHEDULED, f"runs call {seen.agent_url}")


def with_conditions(status: PallasTriggerStatus, seen: TriggerObservation, now: str) -> PallasTriggerStatus:
    """`status` with the conditions for `seen` (transition times kept where nothing changed)."""
    stamped = stamp(trigger_verdicts(seen), status.conditions, seen.generation, now)
    return status.model_copy(update={"conditions": stamped, "observed_generation": seen.generation})


def runnable(status: PallasTriggerStatus) -> bool:
    """Whether the conditions say the trigger fires (Ready True)."""
    return any(c.type == READY and c.status == "True" for c in status.conditions)
