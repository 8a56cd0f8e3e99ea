"""The permissions the operator needs, and no more.

The source of docs/operator.md's list and of the chart's ClusterRole. The RBAC integration test
runs the operator with exactly these.
"""

from __future__ import annotations

from typing import Any, Final

from pallas_api import names
from pallas_api.config import INVOKE_VERB

_WRITE_CHILDREN: Final = ["get", "list", "watch", "create", "patch", "delete"]

CLUSTER_RULES: Final[list[dict[str, Any]]] = [
    {
        # Watched and indexed. kopf only runs event handlers, which write nothing.
        "apiGroups": [names.GROUP],
        "resources": [names.AGENT_PLURAL, names.DEPLOYMENT_PLURAL, names.TRIGGER_PLURAL],
        "verbs": ["get", "list", "watch"],
    },
    {
        # Finalizers only (`pallas.dev/conversations`, a merge patch of metadata.finalizers):
        # a deleted agent's conversations are purged before it goes. Never its spec.
        "apiGroups": [names.GROUP],
        "resources": [names.AGENT_PLURAL],
        "verbs": ["patch"],
    },
    {
        # The one-shot Job purging a deleted agent's conversations (`pallas conversations purge`).
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["get", "create", "patch", "delete"],
    },
    {
        # Status is written by server-side apply on the status subresource (a trigger's at
        # every run, by the operator that fires it).
        "apiGroups": [names.GROUP],
        "resources": [
            f"{names.AGENT_PLURAL}/status",
            f"{names.DEPLOYMENT_PLURAL}/status",
            f"{names.TRIGGER_PLURAL}/status",
        ],
        "verbs": ["get", "patch"],
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
    {
        # After a live config edit: an annotation on each of the agent's pods makes the kubelet
        # write the new ConfigMap into them at once instead of at its next sync (up to 90 s).
        # Listed by label, patched by merge patch; no more than what creating their Deployment
        # already allows. The scaling loop lists a scaled agent's ready pods too (their IPs, to
        # read each one's /metrics).
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["list", "patch"],
    },
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": _WRITE_CHILDREN},
    {
        # A deployment's bridge credential (hosted stdio servers), created once and never read:
        # `create` alone, so the operator still reads no Secret.
        "apiGroups": [""],
        "resources": ["secrets"],
        "verbs": ["create"],
    },
    {
        # auth.mode kubernetes: the Role letting a deployment's agents identity `invoke` its
        # agents grants what the operator holds; its own probes use that identity.
        "apiGroups": [names.GROUP],
        "resources": [names.AGENT_PLURAL],
        "verbs": [INVOKE_VERB],
    },
    {
        # Short-lived tokens of a deployment's agents ServiceAccount for the operator's probes:
        # the agents already hold that identity, so the token tells them nothing new.
        "apiGroups": [""],
        "resources": ["serviceaccounts/token"],
        "verbs": ["create"],
    },
    {
        # auth.mode kubernetes: agents review callers' tokens and rights (TokenReview,
        # SubjectAccessReview are cluster-scoped, so a ClusterRoleBinding of the built-in
        # system:auth-delegator role). Held here because one may grant only what one holds.
        "apiGroups": ["authentication.k8s.io"],
        "resources": ["tokenreviews"],
        "verbs": ["create"],
    },
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    {
        # That ClusterRoleBinding, one per deployment, read and written by name; listed once per
        # start, by its labels, to delete those whose deployment went while no operator ran.
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["clusterrolebindings"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
    # kopf's own needs: it follows CRDs (resource discovery) and namespaces (what to watch).
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
]
"""Bound cluster-wide (ClusterRoleBinding) or per watched namespace (RoleBindings)."""

EVENT_KIND_VERBS: Final = ["list", "watch"]
"""On each kind of the chart's `triggers.eventKinds`: an event trigger's watch lists, then watches.
The rules are made from the values (`pallas.rbac.eventRules`), not listed here: which kinds is
the installer's choice."""

LEASE_RULES: Final[list[dict[str, Any]]] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
]
"""Bound in the operator's own namespace only (leader election)."""

AUTH_DELEGATOR: Final = "system:auth-delegator"
"""The built-in ClusterRole with exactly tokenreviews and subjectaccessreviews: create."""

USER_VIEW_RULES: Final[list[dict[str, Any]]] = [
    {
        "apiGroups": [names.GROUP],
        "resources": [names.AGENT_PLURAL, names.DEPLOYMENT_PLURAL, names.TRIGGER_PLURAL],
        "verbs": ["get", "list", "watch"],
    },
]
"""The chart's `pallas-view`, aggregated into the built-in view, edit and admin roles."""

USER_EDIT_RULES: Final[list[dict[str, Any]]] = [
    *USER_VIEW_RULES,
    {
        "apiGroups": [names.GROUP],
        "resources": [names.AGENT_PLURAL, names.DEPLOYMENT_PLURAL, names.TRIGGER_PLURAL],
        "verbs": ["create", "update", "patch", "delete", "deletecollection"],
    },
    {"apiGroups": [names.GROUP], "resources": [names.AGENT_PLURAL], "verbs": [INVOKE_VERB]},
]
"""The chart's `pallas-edit` (write and talk to agents), aggregated into edit and admin."""
