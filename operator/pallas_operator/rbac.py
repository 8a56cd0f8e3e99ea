"""The permissions the operator needs, and no more.

The source of docs/operator.md's list and of the chart's ClusterRole. The RBAC integration test
runs the operator with exactly these.
"""

from __future__ import annotations

from typing import Any, Final

from pallas_api import names

_WRITE_CHILDREN: Final = ["get", "list", "watch", "create", "patch", "delete"]

CLUSTER_RULES: Final[list[dict[str, Any]]] = [
    {
        # Watched and indexed. Never patched: kopf only runs event handlers, which write nothing.
        "apiGroups": [names.GROUP],
        "resources": [names.AGENT_PLURAL, names.DEPLOYMENT_PLURAL],
        "verbs": ["get", "list", "watch"],
    },
    {
        # Status is written by server-side apply on the status subresource.
        "apiGroups": [names.GROUP],
        "resources": [f"{names.AGENT_PLURAL}/status", f"{names.DEPLOYMENT_PLURAL}/status"],
        "verbs": ["get", "patch"],
    },
    {
        # Read for the pod-template hash (only digests are kept) and for missing-key checks.
        "apiGroups": [""],
        "resources": ["secrets"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["configmaps", "services", "serviceaccounts"], "verbs": _WRITE_CHILDREN},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": _WRITE_CHILDREN},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _WRITE_CHILDREN},
    {
        # The registry's Role and RoleBinding; granting what the operator itself holds
        # (read PallasAgents/PallasDeployments) needs neither `escalate` nor `bind`.
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": _WRITE_CHILDREN,
    },
    {"apiGroups": ["monitoring.coreos.com"], "resources": ["servicemonitors"], "verbs": _WRITE_CHILDREN},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    # kopf's own needs: it follows CRDs (resource discovery) and namespaces (what to watch).
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
]
"""Bound cluster-wide (ClusterRoleBinding) or per watched namespace (RoleBindings)."""

LEASE_RULES: Final[list[dict[str, Any]]] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
]
"""Bound in the operator's own namespace only (leader election)."""
