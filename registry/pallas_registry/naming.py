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

import hashlib
import re

from pallas_api import names
from pallas_registry.state import AgentState

CLUSTER_DOMAIN = "cluster.local"
MAX_NAME = 200
# Leaves room for an agent segment of a Kubernetes name's usual 63 characters and more.
MAX_PREFIX = 120
REMOTE_URL = re.compile(r"^https?://[^\s]+$")
_PREFIX_BAD = re.compile(r"[^a-zA-Z0-9.-]+")
_SEGMENT_BAD = re.compile(r"[^a-zA-Z0-9._-]+")


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[: limit - 9]}-{digest}"


def default_name_prefix(namespace: str, cluster_domain: str = CLUSTER_DOMAIN) -> str:
    """The reverse-DNS prefix derived from a namespace: `local.cluster.svc.<namespace>`."""
    return _clean_prefix(names.cluster_name_prefix(namespace or "default", cluster_domain))


def _clean_prefix(prefix: str) -> str:
    cleaned = _PREFIX_BAD.sub("-", prefix).strip(".-")
    return _shorten(cleaned or "local.pallas", MAX_PREFIX)


def name_prefix(state: AgentState) -> str:
    """The prefix of `state`'s server name: its configured one, else the namespace-derived one."""
    if state.name_prefix:
        return _clean_prefix(state.name_prefix)
    return default_name_prefix(state.namespace)


def server_name(state: AgentState) -> str:
    """`<prefix>/<agent>`, matching the schema's name pattern and length."""
    prefix = name_prefix(state)
    segment = _SEGMENT_BAD.sub("-", state.name).strip("-") or "agent"
    return f"{prefix}/{_shorten(segment, MAX_NAME - len(prefix) - 1)}"


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
