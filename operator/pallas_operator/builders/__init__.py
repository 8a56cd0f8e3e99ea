"""Pure builders: one function per child object kind, from specs to plain manifests.

No client, no kopf, no clock: the same inputs always give the same objects, which is what makes
server-side apply idempotent and the golden tests meaningful.
"""

from pallas_operator.builders.access import access_children, agents_service_account, auth_delegation_binding
from pallas_operator.builders.agent import (
    AgentWorkload,
    agent_deployment,
    agent_disruption_budget,
    agent_service,
)
from pallas_operator.builders.configmap import agent_config_map
from pallas_operator.builders.meta import Manifest, Owner, agent_labels, registry_labels
from pallas_operator.builders.monitoring import service_monitors
from pallas_operator.builders.network import agents_network_policy, bridges_network_policy
from pallas_operator.builders.registry import registry_children
from pallas_operator.builders.stdio import hosted_servers, stdio_children, stdio_secret_bindings

__all__ = [
    "AgentWorkload",
    "Manifest",
    "Owner",
    "access_children",
    "agent_config_map",
    "agent_deployment",
    "agent_disruption_budget",
    "agent_labels",
    "agent_service",
    "agents_network_policy",
    "agents_service_account",
    "auth_delegation_binding",
    "bridges_network_policy",
    "hosted_servers",
    "registry_children",
    "registry_labels",
    "service_monitors",
    "stdio_children",
    "stdio_secret_bindings",
]
