"""A deployment's agents identity for `auth.mode: kubernetes`: ServiceAccount, Role, bindings.

Agents of the deployment run as the ServiceAccount `<deployment>-agents`, which may create
TokenReviews and SubjectAccessReviews (the built-in `system:auth-delegator` ClusterRole, bound
cluster-wide because both reviews are cluster-scoped; nothing else) and `invoke` the
deployment's own agents (a Role naming them). The operator probes agents with short-lived tokens
of that ServiceAccount, so what it presents to an agent is an identity the agent already has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pallas_api import names
from pallas_api.config import INVOKE_VERB
from pallas_operator.builders.meta import Manifest, Owner, component_labels, metadata
from pallas_operator.operator_rbac import AUTH_DELEGATOR

RBAC = "rbac.authorization.k8s.io"


def _labels(deployment: str) -> dict[str, str]:
    return component_labels(deployment, "agent", names.agents_service_account(deployment))


def agents_service_account(owner: Owner, annotations: Mapping[str, str] | None = None) -> Manifest:
    """The identity the deployment's agent pods run as (`spec.runtime.serviceAccount`'s annotations)."""
    name = names.agents_service_account(owner.name)
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(name, owner, _labels(owner.name), dict(annotations or {})),
        "automountServiceAccountToken": False,  # the agent pods mount it explicitly
    }


def agents_invoke_role(owner: Owner, agents: Sequence[str]) -> Manifest:
    """`invoke` on exactly the deployment's agents (never all of the namespace's)."""
    name = names.agents_service_account(owner.name)
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "Role",
        "metadata": metadata(name, owner, _labels(owner.name)),
        "rules": [
            {
                "apiGroups": [names.GROUP],
                "resources": [names.AGENT_PLURAL],
                "resourceNames": sorted(agents),
                "verbs": [INVOKE_VERB],
            }
        ],
    }


def agents_invoke_binding(owner: Owner) -> Manifest:
    """Binds that Role to the agents' ServiceAccount."""
    name = names.agents_service_account(owner.name)
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": metadata(name, owner, _labels(owner.name)),
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
    }


def auth_delegation_binding(owner: Owner) -> Manifest:
    """The ClusterRoleBinding of `system:auth-delegator` to the agents' and the registry's ServiceAccounts.

    Cluster-scoped, so it cannot be owned by the (namespaced) PallasDeployment: the operator
    deletes it itself when the deployment goes or leaves `kubernetes` mode. Its labels say
    whose it is.
    """
    labels = {**_labels(owner.name), names.LABEL_NAMESPACE: owner.namespace}
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": names.auth_delegation_binding(owner.namespace, owner.name),
            "labels": labels,
        },
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": AUTH_DELEGATOR},
        # The registry checks the callers of its fleet endpoint (`/mcp`) as the agents do, so it
        # makes the same two reviews; a subject whose ServiceAccount does not exist (no
        # registry) grants nothing.
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": names.agents_service_account(owner.name),
                "namespace": owner.namespace,
            },
            {
                "kind": "ServiceAccount",
                "name": names.registry_name(owner.name),
                "namespace": owner.namespace,
            },
        ],
    }


def access_children(
    owner: Owner, agents: Sequence[str], annotations: Mapping[str, str] | None = None
) -> list[Manifest]:
    """The namespaced identity objects of a deployment in kubernetes mode.

    Without agents there is no Role: a rule with empty `resourceNames` would grant every agent.
    """
    children = [agents_service_account(owner, annotations)]
    if agents:
        children += [agents_invoke_role(owner, agents), agents_invoke_binding(owner)]
    return children
