"""Whether a watch event fires an event trigger, and the values its message is rendered from.

Pure: the operator's watch hands each event (its type, the object, and the object as last seen
when it has it) to `decide`; what it returns says whether a run starts and why not. `in_scope`
says first whether the object is one the trigger looks at (its namespace, its labels), and
`EventKind` names the kinds the chart lets the operator watch (`triggers.eventKinds`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pallas_api.names import API_GROUP, DNS_LABEL
from pallas_api.triggers.when import Condition, ConditionError

_RESOURCE = re.compile(DNS_LABEL)
_GROUP = re.compile(API_GROUP)


@dataclass(frozen=True, slots=True)
class EventKind:
    """A kind the operator may watch for event triggers: its API group ("" for core) and resource."""

    api_group: str
    resource: str

    def __str__(self) -> str:
        """`pods`, `apps/deployments`: what `--event-kind` takes."""
        return f"{self.api_group}/{self.resource}" if self.api_group else self.resource

    def value(self) -> str:
        """The entry of the chart's `triggers.eventKinds` that allows it (for a message)."""
        return f'{{apiGroup: "{self.api_group}", resource: {self.resource}}}'

    @classmethod
    def of(cls, api_version: str, kind: str) -> EventKind:
        """The entry a trigger's `apiVersion` and `kind` need (`apps/v1`, `Deployment` → apps/deployments)."""
        return cls(split_api_version(api_version)[0], kind_resource(kind))

    @classmethod
    def parse(cls, text: str) -> EventKind:
        """`pods` (core), `apps/deployments`.

        Raises:
            ValueError: not `[group/]resource` in Kubernetes' lower-case form.
        """
        group, _, resource = text.strip().rpartition("/")
        if not _RESOURCE.match(resource) or not _GROUP.match(group):
            raise ValueError(f"{text!r} is not [apiGroup/]resource, e.g. pods or apps/deployments")
        if (group, resource) == ("", "secrets"):  # the operator holds no right on Secrets at all
            raise ValueError("Secrets cannot be watched for triggers: a watch would read every value")
        return cls(group, resource)


def split_api_version(api_version: str) -> tuple[str, str]:
    """(group, version) of `apps/v1`; ("", "v1") for the core group's `v1`."""
    group, _, version = api_version.rpartition("/")
    return group, version


def kind_resource(kind: str) -> str:
    """The resource (plural) of a kind, guessed as the API machinery guesses it.

    Kubernetes' own `UnsafeGuessKindToResource`: lower-cased, then `-s`, `-x`, `-z`, `-ch`, `-sh`
    take `es`, a consonant's `-y` becomes `ies`, else `s` (Pod → pods, Ingress → ingresses,
    NetworkPolicy → networkpolicies). Every built-in namespaced kind follows it.
    """
    lower = kind.lower()
    if lower.endswith(("s", "x", "z", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + "s"


class _Requirement(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def operator(self) -> str: ...
    @property
    def values(self) -> Sequence[str]: ...


class Selector(Protocol):
    """A label selector (`pallas_api.spec.common.LabelSelector`)."""

    @property
    def match_labels(self) -> Mapping[str, str]:
        """Labels that must all be present with these values."""
        ...

    @property
    def match_expressions(self) -> Sequence[_Requirement]:
        """Expressions that must all hold."""
        ...


def selects(selector: Selector | None, labels: Mapping[str, str]) -> bool:
    """Whether `labels` satisfy a Kubernetes label selector (None selects everything)."""
    if selector is None:
        return True
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    for expr in selector.match_expressions:
        present = expr.key in labels
        held = {
            "In": present and labels[expr.key] in expr.values,
            "NotIn": not present or labels[expr.key] not in expr.values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(expr.operator, False)
        if not held:
            return False
    return True


def in_scope(namespace: str | None, selector: Selector | None, obj: Mapping[str, object]) -> bool:
    """Whether the object is one the trigger looks at: in `namespace` (None: any), its labels selected."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    if namespace is not None and meta.get("namespace") != namespace:
        return False
    labels = meta.get("labels")
    return selects(
        selector, {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
    )


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
