"""Object metadata shared by every child: owner references and the labels of api.md §1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pallas_api import names
from pallas_api.spec import LabelSelector

Manifest = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Owner:
    """The PallasAgent or PallasDeployment a child belongs to (and is garbage-collected with)."""

    kind: str
    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        """The controller owner reference: deleting the owner deletes the child."""
        return {
            "apiVersion": names.API_VERSION_STRING,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def component_labels(deployment: str, component: str, instance: str) -> dict[str, str]:
    """The labels of api.md §1 common to every child of a deployment."""
    return {
        names.LABEL_NAME: f"pallas-{component}",
        names.LABEL_INSTANCE: instance,
        names.LABEL_COMPONENT: component,
        names.LABEL_PART_OF: deployment,
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_DEPLOYMENT: deployment,
    }


def agent_labels(agent: str, deployment: str) -> dict[str, str]:
    """Labels on every child of an agent."""
    return {**component_labels(deployment, "agent", agent), names.LABEL_AGENT: agent}


def agent_selector(agent: str) -> dict[str, str]:
    """The pod selector of an agent (immutable on a Deployment, so it never changes)."""
    return {names.LABEL_AGENT: agent, names.LABEL_COMPONENT: "agent"}


def registry_labels(deployment: str) -> dict[str, str]:
    """Labels on every registry child; `pallas.dev/agent` is left out: it belongs to no agent."""
    return component_labels(deployment, "registry", names.registry_name(deployment))


def registry_selector(deployment: str) -> dict[str, str]:
    """The pod selector of a deployment's registry."""
    return {names.LABEL_DEPLOYMENT: deployment, names.LABEL_COMPONENT: "registry"}


def metadata(
    name: str, owner: Owner, labels: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """Metadata of a child named `name` in the owner's namespace."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": owner.namespace,
        "labels": dict(labels),
        "ownerReferences": [owner.reference()],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def label_selector(selector: LabelSelector) -> dict[str, Any]:
    """A Kubernetes LabelSelector from the model, leaving out what is empty."""
    out: dict[str, Any] = {}
    if selector.match_labels:
        out["matchLabels"] = dict(selector.match_labels)
    if selector.match_expressions:
        out["matchExpressions"] = [
            {"key": e.key, "operator": e.operator, **({"values": list(e.values)} if e.values else {})}
            for e in selector.match_expressions
        ]
    return out
