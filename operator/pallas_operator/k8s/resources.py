"""The Kubernetes kinds the operator reads and writes, as lightkube resource classes."""

from __future__ import annotations

from typing import Any

from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import ConfigMap, Pod, Service, ServiceAccount
from lightkube.resources.networking_v1 import NetworkPolicy
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding, Role, RoleBinding

from pallas_api import names
from pallas_io.kube import PallasAgent, PallasDeployment, PallasTrigger

ServiceMonitor = create_namespaced_resource(
    "monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors"
)

CHILD_KINDS: dict[str, Any] = {
    "ConfigMap": ConfigMap,
    "Deployment": Deployment,
    "Service": Service,
    "PodDisruptionBudget": PodDisruptionBudget,
    "ServiceAccount": ServiceAccount,
    "Role": Role,
    "RoleBinding": RoleBinding,
    "ServiceMonitor": ServiceMonitor,
    "NetworkPolicy": NetworkPolicy,
    "ClusterRoleBinding": ClusterRoleBinding,
    "Job": Job,
}
"""Every kind of child, by `kind`; the operator writes no other. ClusterRoleBinding is the one
cluster-scoped kind (its namespace is "" wherever a child key has one). A Job is the one-shot
purge of a deleted agent's conversations (`reconcile.conversation_purge`), never watched."""

READ_KINDS: dict[str, Any] = {"Pod": Pod}
"""Kinds the operator only reads by name or label (a deleted agent's pods, until they are gone)."""

__all__ = [
    "CHILD_KINDS",
    "OWNER_KINDS",
    "READ_KINDS",
    "PallasAgent",
    "PallasDeployment",
    "PallasTrigger",
    "ServiceMonitor",
]

OWNER_KINDS: dict[str, Any] = {
    names.AGENT_KIND: PallasAgent,
    names.DEPLOYMENT_KIND: PallasDeployment,
    names.TRIGGER_KIND: PallasTrigger,
}
