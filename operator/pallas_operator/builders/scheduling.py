"""Where a Pallas pod runs and how soon it leaves a failed node: spread constraints, tolerations.

Two defaults, both for losing a node. Replicas spread over nodes, so one node going takes at
most its share of an agent's pods; and a pod on a node that stopped reporting is evicted (and
replaced elsewhere) after `nodeFailureTolerationSeconds`, not after Kubernetes' 300 s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pallas_api.spec import NODE_FAILURE_TAINTS, TopologySpreadConstraint
from pallas_operator.builders.meta import label_selector

HOSTNAME = "kubernetes.io/hostname"
ROLLOUT_LABEL = "pod-template-hash"
"""The label each ReplicaSet gives its pods: as a `matchLabelKeys` entry it keeps the pods of a
rollout's new ReplicaSet from being counted with the old ones, which are about to go."""


def default_spread(selector: Mapping[str, str]) -> dict[str, Any]:
    """At most one pod more on one node than on another, preferred rather than required.

    `ScheduleAnyway`: a cluster with fewer nodes than replicas (one node, a node drained) must
    still run every replica; the scheduler only prefers the nodes that keep the skew.
    """
    return {
        "maxSkew": 1,
        "topologyKey": HOSTNAME,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": dict(selector)},
        "matchLabelKeys": [ROLLOUT_LABEL],
    }


def spread_constraints(
    chosen: Sequence[TopologySpreadConstraint] | None, replicas: int, selector: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The pod's topologySpreadConstraints: the spec's list, else the default with replicas.

    A list in the spec (even an empty one) replaces the default whole; without one the pod gets
    `default_spread` with more than one replica and nothing with one. A constraint without a
    `labelSelector` counts the pods of `selector` (the workload's own).
    """
    if chosen is None:
        return [default_spread(selector)] if replicas > 1 else []
    return [_constraint(c, selector) for c in chosen]


def _constraint(c: TopologySpreadConstraint, selector: Mapping[str, str]) -> dict[str, Any]:
    own = {"matchLabels": dict(selector)}
    out: dict[str, Any] = {
        "maxSkew": c.max_skew,
        "topologyKey": c.topology_key,
        "whenUnsatisfiable": c.when_unsatisfiable,
        "labelSelector": own if c.label_selector is None else label_selector(c.label_selector),
    }
    if c.match_label_keys:
        out["matchLabelKeys"] = list(c.match_label_keys)
    if c.min_domains is not None:
        out["minDomains"] = c.min_domains
    if c.node_affinity_policy is not None:
        out["nodeAffinityPolicy"] = c.node_affinity_policy
    if c.node_taints_policy is not None:
        out["nodeTaintsPolicy"] = c.node_taints_policy
    return out


def _covers(toleration: Mapping[str, Any], taint: str) -> bool:
    """Whether a toleration matches the NoExecute taint `taint` (whatever its value).

    An empty key with `Exists` matches every taint. Kubernetes evicts after the shortest
    `tolerationSeconds` of the tolerations that match, so adding ours beside such a toleration
    would cut the user's short.
    """
    if toleration.get("effect") not in (None, "", "NoExecute"):
        return False
    key = toleration.get("key") or ""
    return key == taint or (not key and toleration.get("operator") == "Exists")


def tolerations(user: Sequence[Mapping[str, Any]], node_failure_seconds: int) -> list[dict[str, Any]]:
    """The user's tolerations, then one per node-failure taint that none of them matches.

    Ours bound how long the pod stays on a node that stopped reporting: the node lifecycle
    controller taints it `unreachable` or `not-ready` (NoExecute) once its grace period is
    over, and evicts the pod `node_failure_seconds` later so its Deployment replaces it.
    """
    out = [dict(t) for t in user]
    for taint in NODE_FAILURE_TAINTS:
        if not any(_covers(t, taint) for t in user):
            out.append(
                {
                    "key": taint,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": node_failure_seconds,
                }
            )
    return out
