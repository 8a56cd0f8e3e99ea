"""Conditions the Kubernetes way.

Typed, with reasons as constants, and transition times that move only when a condition's status
does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pallas_api.conditions import (
    ACCEPTED,
    AUTHENTICATED,
    AVAILABLE,
    DEPENDENCIES_READY,
    HEALTHY,
    MONITORING_READY,
    PROVIDERS_HEALTHY,
    READY,
    REGISTRY_AVAILABLE,
    SERVERS_AVAILABLE,
    VERIFIED,
)
from pallas_api.status import Condition, ConditionStatus

__all__ = [
    "ACCEPTED",
    "AUTHENTICATED",
    "AVAILABLE",
    "DEPENDENCIES_READY",
    "HEALTHY",
    "MONITORING_READY",
    "PROVIDERS_HEALTHY",
    "READY",
    "REGISTRY_AVAILABLE",
    "SERVERS_AVAILABLE",
    "VERIFIED",
    "Verdict",
    "false",
    "stamp",
    "true",
    "unknown",
]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A condition before it is stamped with a generation and a transition time."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""

    @property
    def true(self) -> bool:
        """Whether the condition holds."""
        return self.status == "True"


def true(type_: str, reason: str, message: str = "") -> Verdict:
    """A verdict with status True."""
    return Verdict(type_, "True", reason, message)


def false(type_: str, reason: str, message: str = "") -> Verdict:
    """A verdict with status False."""
    return Verdict(type_, "False", reason, message)


def unknown(type_: str, reason: str, message: str = "") -> Verdict:
    """A verdict with status Unknown."""
    return Verdict(type_, "Unknown", reason, message)


def stamp(
    verdicts: Iterable[Verdict], previous: Sequence[Condition], generation: int, now: str
) -> list[Condition]:
    """Conditions for the verdicts; a condition whose status did not change keeps its time."""
    before = {c.type: c for c in previous}
    out = []
    for v in verdicts:
        old = before.get(v.type)
        since = old.last_transition_time if old is not None and old.status == v.status else now
        out.append(
            Condition(
                type=v.type,
                status=v.status,
                reason=v.reason,
                message=v.message,
                observed_generation=generation,
                last_transition_time=since,
            )
        )
    return out
