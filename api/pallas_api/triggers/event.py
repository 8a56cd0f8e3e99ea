"""Whether a watch event fires an event trigger, and the values its message is rendered from.

Pure: the operator's watch hands each event (its type, the object, and the object as last seen
when it has it) to `decide`; what it returns says whether a run starts and why not.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from pallas_api.triggers.when import Condition, ConditionError


@dataclass(frozen=True, slots=True)
class EventDecision:
    """`fire` with the template's `.object`, `.type` and `.reason`; else why not."""

    fire: bool
    values: Mapping[str, object]
    why_not: str = ""


def decide(
    types: Collection[str],
    condition: Condition | None,
    event_type: str,
    obj: Mapping[str, object],
    old_object: Mapping[str, object] | None = None,
) -> EventDecision:
    """Whether this watch event starts a run.

    A `when` that fails on this object (a field it lacks, a type mismatch) does not fire, as a
    false one does, and says why: a Pod has no `status.containerStatuses` before it is
    scheduled, and that must not count as a failed run.
    """
    values: dict[str, object] = {
        "object": dict(obj),
        "type": event_type,
        "reason": event_reason(event_type, obj),
    }
    if event_type not in types:
        return EventDecision(False, values, f"{event_type} is not among the trigger's types")
    if condition is not None:
        try:
            holds = condition.holds({"object": obj, "oldObject": old_object, "type": event_type})
        except ConditionError as exc:
            return EventDecision(False, values, str(exc))
        if not holds:
            return EventDecision(False, values, "when is false")
    return EventDecision(True, values)


def event_reason(event_type: str, obj: Mapping[str, object]) -> str:
    """The template's `.reason`: the most telling reason the object states, else the event's type.

    In order: a container waiting or terminated with a reason (`CrashLoopBackOff`, `OOMKilled`:
    what a triage wants to name), the object's `status.reason` (`Evicted`), the reason of its
    first condition that is not True, else the event's type (`ADDED`).
    """
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return event_type
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in _mappings(status.get(key)):
            state = container.get("state")
            for phase in ("waiting", "terminated"):
                detail = state.get(phase) if isinstance(state, Mapping) else None
                if isinstance(detail, Mapping) and isinstance(detail.get("reason"), str) and detail["reason"]:
                    return str(detail["reason"])
    if isinstance(status.get("reason"), str) and status["reason"]:
        return str(status["reason"])
    for condition in _mappings(status.get("conditions")):
        if (
            condition.get("status") != "True"
            and isinstance(condition.get("reason"), str)
            and condition["reason"]
        ):
            return str(condition["reason"])
    return event_type


def _mappings(value: object) -> list[Mapping[str, object]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []
