"""`spec.network.policy`: NetworkPolicies per deployment guarding its agents and its bridges.

The agents' admits traffic only from the deployment's own agents (peer calls), its registry,
the operator (verification and health probes) and the peers listed in `allowFrom`. The hosted
stdio servers' bridges (when it has some) admit only the deployment's agents: nothing else calls
them, and the kubelet's probes are not subject to NetworkPolicies. Egress is not restricted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pallas_api import names
from pallas_api.spec import NetworkPeer, PallasDeploymentSpec
from pallas_operator.builders.meta import (
    Manifest,
    Owner,
    component_labels,
    label_selector,
    metadata,
    registry_selector,
)


def _peer(peer: NetworkPeer) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if peer.namespace_selector is not None:
        out["namespaceSelector"] = label_selector(peer.namespace_selector)
    if peer.pod_selector is not None:
        out["podSelector"] = label_selector(peer.pod_selector)
    return out


def agents_selector(deployment: str) -> dict[str, str]:
    """Every agent pod of a deployment."""
    return {names.LABEL_DEPLOYMENT: deployment, names.LABEL_COMPONENT: "agent"}


def agents_network_policy(
    owner: Owner,
    spec: PallasDeploymentSpec,
    operator_namespace: str | None,
    operator_labels: Mapping[str, str],
) -> Manifest:
    """The NetworkPolicy of a deployment's agents.

    Args:
        owner: The PallasDeployment.
        spec: Its spec (`network.allowFrom`).
        operator_namespace: Where the operator's pods run; None leaves the operator out (an
            operator outside the cluster reaches agents through other means).
        operator_labels: Labels selecting the operator's pods.
    """
    sources: list[dict[str, Any]] = [
        {"podSelector": {"matchLabels": agents_selector(owner.name)}},
        {"podSelector": {"matchLabels": registry_selector(owner.name)}},
    ]
    if operator_namespace is not None and operator_labels:
        sources.append(
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}},
                "podSelector": {"matchLabels": dict(operator_labels)},
            }
        )
    sources += [_peer(p) for p in spec.network.allow_from]
    labels = component_labels(owner.name, "agent", names.network_policy_name(owner.name))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(names.network_policy_name(owner.name), owner, labels),
        "spec": {
            "podSelector": {"matchLabels": agents_selector(owner.name)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": sources}],
        },
    }


def bridges_network_policy(owner: Owner) -> Manifest:
    """The NetworkPolicy of a deployment's hosted stdio servers: their bridges admit its agents only."""
    name = names.bridges_network_policy_name(owner.name)
    selector = {names.LABEL_DEPLOYMENT: owner.name, names.LABEL_COMPONENT: names.STDIO_COMPONENT}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name, owner, component_labels(owner.name, names.STDIO_COMPONENT, name)),
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": agents_selector(owner.name)}}]}],
        },
    }
