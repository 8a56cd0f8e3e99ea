"""What an observed apps/v1 Deployment says about the pods behind it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Workload:
    """The state of a Deployment as the operator needs it."""

    replicas: int
    ready_replicas: int
    available: bool
    """The Deployment controller reports minimum availability (condition Available=True)."""
    rolled_out: bool
    """The latest spec is observed and every replica runs it."""
    message: str
    """Why not available, from the Deployment's own conditions when it says."""


def workload(obj: Mapping[str, Any] | None) -> Workload | None:
    """Read a Deployment object (as returned by the API server); None when there is none."""
    if obj is None:
        return None
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    replicas = int(spec.get("replicas", 1))
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    available = conditions.get("Available", {}).get("status") == "True" and replicas > 0
    observed = int(status.get("observedGeneration", 0)) >= int(
        (obj.get("metadata") or {}).get("generation", 0)
    )
    updated = int(status.get("updatedReplicas", 0))
    rolled_out = observed and updated == replicas and int(status.get("replicas", 0)) == replicas
    ready = int(status.get("readyReplicas", 0))
    message = f"{ready}/{replicas} pods ready"
    # Why pods do not come, in the Deployment controller's words (quota, admission, deadline).
    stuck = [
        str(cond.get("message", ""))
        for cond in conditions.values()
        if (cond.get("type") == "ReplicaFailure" and cond.get("status") == "True")
        or cond.get("reason") == "ProgressDeadlineExceeded"
    ]
    if stuck:
        message += "; " + "; ".join(stuck)
    return Workload(replicas, ready, available, rolled_out and available, message)
