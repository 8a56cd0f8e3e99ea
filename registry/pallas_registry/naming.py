"""Server names and agent URLs, always in the shapes the registry schema accepts.

`server.name` is `<prefix>/<agent>` and must match `^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$` with at
most 200 characters. The prefix is the deployment's `registry.namePrefix`, or else derived from
the namespace: the reverse of the namespace's cluster DNS domain (`agents` →
`local.cluster.svc.agents`), so `local.cluster.svc.agents/research` read backwards is the agent
Service's DNS name `research.agents.svc.cluster.local`. Whatever a source hands in, these
functions return a valid name: characters the schema forbids become `-`, and a name that would be
too long is shortened with a hash suffix so distinct agents keep distinct names.
"""

from __future__ import annotations

import re

from pallas_api import names
from pallas_registry.state import AgentState

CLUSTER_DOMAIN = "cluster.local"
MAX_NAME = names.MAX_SERVER_NAME
MAX_PREFIX = names.MAX_NAME_PREFIX
REMOTE_URL = re.compile(r"^https?://[^\s]+$")


def default_name_prefix(namespace: str, cluster_domain: str = CLUSTER_DOMAIN) -> str:
    """The reverse-DNS prefix derived from a namespace: `local.cluster.svc.<namespace>`."""
    return names.clean_name_prefix(names.cluster_name_prefix(namespace or "default", cluster_domain))


def name_prefix(state: AgentState) -> str:
    """The prefix of `state`'s server name: its configured one, else the namespace-derived one."""
    if state.name_prefix:
        return names.clean_name_prefix(state.name_prefix)
    return default_name_prefix(state.namespace)


def server_name(state: AgentState) -> str:
    """`<prefix>/<agent>`, matching the schema's name pattern and length."""
    return names.server_name(name_prefix(state), state.name)


def cluster_url(state: AgentState, cluster_domain: str = CLUSTER_DOMAIN) -> str:
    """The agent Service's in-cluster MCP URL, as the operator publishes it in `status.url`."""
    return f"http://{state.name}.{state.namespace}.svc.{cluster_domain}:{state.service_port}/mcp"


def remote_url(state: AgentState) -> str | None:
    """The URL clients connect to: the public template if set, else `status.url`, else cluster DNS.

    Returns:
        None when no candidate is a valid http(s) URL (the agent is then left out).
    """
    public = names.public_url(state.public_url_template, state.name, state.namespace, state.deployment)
    if public is not None:
        return public
    if state.url is not None:
        return state.url if REMOTE_URL.match(state.url) else None
    fallback = cluster_url(state)
    return fallback if REMOTE_URL.match(fallback) else None
