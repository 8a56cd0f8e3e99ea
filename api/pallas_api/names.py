"""Names shared by the operator, the runtime and the registry.

The API group, kinds, labels, annotations, child names and in-cluster URLs.

Child names are derived, never stored, so any replica of the operator (and a human reading
`kubectl get`) computes the same ones.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final
from urllib.parse import urlsplit

GROUP: Final = "pallas.dev"
VERSION: Final = "v1alpha1"
API_VERSION_STRING: Final = f"{GROUP}/{VERSION}"
CATEGORY: Final = "pallas"

AGENT_KIND: Final = "PallasAgent"
AGENT_PLURAL: Final = "pallasagents"
DEPLOYMENT_KIND: Final = "PallasDeployment"
DEPLOYMENT_PLURAL: Final = "pallasdeployments"
TRIGGER_KIND: Final = "PallasTrigger"
TRIGGER_PLURAL: Final = "pallastriggers"

DNS_LABEL_FORM: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
"""An RFC 1123 label without anchors, for the patterns built from labels (a DNS subdomain, a
`<provider>.<model>` reference, `namespace/name`)."""
DNS_LABEL: Final = f"^{DNS_LABEL_FORM}$"
"""An RFC 1123 label, the form of most Kubernetes names (a namespace, a provider's key, a
capability tag): lower-case letters, digits and '-', a letter or digit at each end. The one
definition: the models, the CRDs' CEL rules, the registry's query checks and the chart's values
all use it; the length (at most 63) is checked beside it."""
API_GROUP: Final = rf"^({DNS_LABEL_FORM}(\.{DNS_LABEL_FORM})*)?$"
"""A Kubernetes API group: "" (the core group) or a DNS subdomain (`apps`, `networking.k8s.io`)."""

FIELD_MANAGER: Final = "pallas-operator"
"""The field manager of every server-side apply the operator makes (bar `SCALING_FIELD_MANAGER`)."""
SCALING_FIELD_MANAGER: Final = "pallas-operator-scaling"
"""The field manager of the scaling loop's one write, a scaled agent's Deployment `spec.replicas`:
its own, so the reconcile's apply (which leaves `replicas` out under scaling) and the loop never
take the field from each other (docs/operator.md "Scaling")."""

CONVERSATIONS_FINALIZER: Final = f"{GROUP}/conversations"
"""On a PallasAgent whose deployment keeps conversations in PostgreSQL: the operator purges the
agent's conversations (`retainAfterDeleteSeconds`) before it lets the agent go."""
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_DEPLOYMENT: Final = "pallas.dev/deployment"
LABEL_AGENT: Final = "pallas.dev/agent"
LABEL_NAMESPACE: Final = "pallas.dev/namespace"
"""On cluster-scoped children (which have no namespace of their own): the owner's namespace."""
MANAGED_BY: Final = "pallas-operator"

CONVERSATION_META: Final = "pallas.dev/conversationId"
"""The `_meta` key of a send_message (or create_conversation) result naming its conversation."""
TOOL_CALLS_META: Final = "pallas.dev/toolCalls"
"""`send_message`'s `_meta` key: `true` in a request asks for the turn's tool calls, listed under
the same key of the result's `_meta` (docs/api.md §3)."""
CHUNK_META: Final = "pallas.dev/chunk"
"""A progress notification's `_meta` key: the typed chunk it carries (a tool call, a tool result,
the turn's end) for a request that asked for chunks (docs/api.md §3, progress)."""
CHUNKS_META: Final = "pallas.dev/chunks"
"""`send_message`'s `_meta` key: `true` in a request asks for typed chunks with its progress."""
RESUMABLE_META: Final = "pallas.dev/resumable"
"""`send_message`'s `_meta` key: `true` in a request keeps the turn running as an MCP task when
the request's connection drops; its first progress notification names the task
(`TASK_PROGRESS_PREFIX` + id), which `tasks/get` follows to the answer (`pallas chat` does)."""
TASK_PROGRESS_PREFIX: Final = "pallas task "
"""The message of a resumable turn's first progress notification: this, then the task's id."""
HISTORY_TRIMMED_META: Final = "pallas.dev/historyTrimmed"
"""`send_message` result `_meta` key: `{"droppedMessages": N}` when the turn's model calls left out
the N oldest stored messages to fit the model's context window (docs/api.md §3)."""
INSTRUCTION_URI: Final = "pallas://instruction"
"""The MCP resource holding an agent's instruction (its model's system prompt)."""

ANNOTATION_IDENTITY: Final = "pallas.dev/agent-identity"
"""On a conversations-purge Job: the agent identity whose rows it deletes."""
ANNOTATION_CONFIG_HASH: Final = "pallas.dev/config-hash"
"""On an agent's pod template: sha256 of the part of its config a running process cannot take
(`pallas_api.live.process_digest`), so only edits of that part roll the pods."""
ANNOTATION_CONFIG_SYNC: Final = "pallas.dev/config-sync"
"""On an agent's pods (not the template): the config hash the operator last asked the kubelet to
deliver. Patching it makes the kubelet sync the pod, and so refresh its ConfigMap volume at once
instead of at its next periodic sync (docs/operator.md "Live config")."""
ANNOTATION_APPLIED_HASH: Final = "pallas.dev/applied-hash"
"""On every child: sha256 of the manifest last applied, so a restarted operator knows it is current."""

CONFIG_FILE: Final = "agent.yaml"
CONFIG_DIR: Final = "/etc/pallas"
SECRETS_DIR: Final = "/etc/pallas-secrets"
"""Where agent and registry pods mount their Secret volume: one file per secret variable
(`pallas_api.render.SecretBinding.env`), read at each use (`pallas_io.secrets`)."""
METRICS_PORT_NAME: Final = "http"


def config_map_name(agent: str) -> str:
    """The ConfigMap holding an agent's runtime config."""
    return f"{agent}-config"


def registry_name(deployment: str) -> str:
    """The name of every registry child (Deployment, Service, ServiceAccount, Role, RoleBinding)."""
    return f"{deployment}-registry"


STDIO_BRIDGE_PORT: Final = 8000
"""The port of a hosted stdio server's bridge (container and Service)."""
STDIO_COMPONENT: Final = "mcp-server"
"""`app.kubernetes.io/component` of a hosted stdio server's children."""


def stdio_server_name(deployment: str, server: str) -> str:
    """The name of every child hosting stdio server `server` of `deployment` (Deployment, Service).

    `<deployment>-mcp-<server>` in lower case with `_` as `-`; when that changes the server's
    name (two keys such as `Fs` and `fs` would meet) or passes 63 characters, it is cut and a
    digest of both names keeps it unique.
    """
    slug = server.lower().replace("_", "-")
    name = f"{deployment}-mcp-{slug}"
    if slug == server and len(name) <= 63:
        return name
    digest = hashlib.sha256(f"{deployment}/{server}".encode()).hexdigest()[:8]
    return f"{name[: 63 - 9].rstrip('-')}-{digest}"


def stdio_server_url(deployment: str, server: str, namespace: str) -> str:
    """The in-cluster MCP URL of a hosted stdio server's bridge."""
    service = stdio_server_name(deployment, server)
    return f"http://{service}.{namespace}.svc.cluster.local:{STDIO_BRIDGE_PORT}/mcp"


BRIDGE_TOKEN_HEADER: Final = "Pallas-Bridge-Token"
"""The header carrying a deployment's bridge credential from its agents to its hosted stdio
servers' bridges (its own header: an `Authorization` forwarded to the server stays apart)."""
BRIDGE_TOKEN_ENV: Final = "PALLAS_BRIDGE_TOKEN"
"""The variable (a file of an agent pod's Secret volume, the bridge container's environment) holding it."""
BRIDGE_TOKEN_KEY: Final = "token"
"""The key of the bridge credential in its Secret (`bridge_token_secret_name`)."""


def bridge_token_secret_name(deployment: str) -> str:
    """The Secret holding a deployment's bridge credential (made by the operator once, kept)."""
    return f"{deployment}-bridge-token"


def service_monitor_name(deployment: str, component: str) -> str:
    """The ServiceMonitor for the agents (`agent`) or the registry (`registry`) of a deployment."""
    return f"{deployment}-{component}s" if component == "agent" else registry_name(deployment)


def agent_url(agent: str, namespace: str, port: int) -> str:
    """The in-cluster MCP URL of an agent: its Service's cluster DNS name."""
    return f"http://{agent}.{namespace}.svc.cluster.local:{port}/mcp"


def service_hosts(service: str, namespace: str) -> list[str]:
    """The DNS names a client inside the cluster may use for a Service, shortest first."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_HTTP_URL = re.compile(r"^https?://[^\s/?#]+\S*$")
"""An http(s) URL with a host and no whitespace (what the registry schema's `remotes[].url` takes)."""


def public_url(template: str, agent: str, namespace: str, deployment: str) -> str | None:
    """An agent's public URL: `publicURLTemplate` with `{agent}`, `{namespace}` and `{deployment}` filled.

    The one filler of the template: the operator's `--allowed-host` and RFC 9728 resource, and the
    registry's remote URL all come from it, so a client that reaches the published URL is
    accepted by the agent it names.

    Returns:
        None when the template is unset, names any other placeholder, or does not give an
        http(s) URL with a host.
    """
    values = {"agent": agent, "namespace": namespace, "deployment": deployment}
    if not template or any(name not in values for name in _PLACEHOLDER.findall(template)):
        return None
    url = _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
    return url if _HTTP_URL.match(url) else None


def public_host(template: str, agent: str, namespace: str, deployment: str) -> str | None:
    """The host of an agent's public URL (`publicURLTemplate`), if one is configured."""
    url = public_url(template, agent, namespace, deployment)
    return None if url is None else urlsplit(url).hostname


def resource_url(agent: str, namespace: str, port: int, deployment: str, template: str) -> str:
    """The URL an agent's callers use (its RFC 9728 resource): the public one, else cluster DNS."""
    return public_url(template, agent, namespace, deployment) or agent_url(agent, namespace, port)


A2A_PATH: Final = "/a2a"
"""Where an agent serves A2A's JSON-RPC binding, beside MCP's `/mcp`."""
AGENT_CARD_PATH: Final = "/.well-known/agent-card.json"
"""Where an agent serves its A2A Agent Card (the A2A specification's well-known path)."""


def a2a_url(mcp_url: str) -> str:
    """An agent's A2A endpoint for its MCP URL: `/mcp` at the end replaced by `/a2a`.

    So whatever reaches the MCP endpoint (cluster DNS, a public URL behind an ingress that
    routes the agent's path prefix) reaches the A2A one too.
    """
    base = mcp_url.rstrip("/")
    base = base.removesuffix("/mcp")
    return f"{base}{A2A_PATH}"


def agent_card_url(mcp_url: str) -> str:
    """Where the Agent Card of the agent at `mcp_url` is served (beside its A2A endpoint)."""
    return a2a_url(mcp_url).removesuffix(A2A_PATH) + AGENT_CARD_PATH


SERVER_CARD_SUFFIX: Final = "/server-card"
"""Appended to an agent's MCP URL: its MCP Server Card (SEP-2127, a draft)."""
SERVER_CARD_MEDIA_TYPE: Final = "application/mcp-server+json"
"""The Server Card's media type in the SEP-2127 draft."""
MCP_CATALOG_PATH: Final = "/.well-known/mcp/catalog.json"
"""Where the registry serves the MCP Catalog of every agent's Server Card (SEP-2127, a draft)."""


MAX_SERVER_NAME: Final = 200
"""The `server.json` schema's longest `name`."""
MAX_NAME_PREFIX: Final = 120
"""The longest name prefix: leaves room for an agent segment of a Kubernetes name's 63 characters."""
_PREFIX_BAD = re.compile(r"[^a-zA-Z0-9.-]+")
_SEGMENT_BAD = re.compile(r"[^a-zA-Z0-9._-]+")


def _shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` with an 8-hex hash suffix, so distinct long texts stay distinct."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[: limit - 9]}-{digest}"


def clean_name_prefix(prefix: str) -> str:
    """A server-name prefix the schema accepts: other characters `-`, at most `MAX_NAME_PREFIX`."""
    cleaned = _PREFIX_BAD.sub("-", prefix).strip(".-")
    return _shorten(cleaned or "local.pallas", MAX_NAME_PREFIX)


def server_name(prefix: str, agent: str) -> str:
    """An agent's server name `<prefix>/<agent>`: the registry's and its Server Card's.

    Within the schema's pattern `^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$` and length; `prefix` is clean.
    """
    segment = _SEGMENT_BAD.sub("-", agent).strip("-") or "agent"
    return f"{prefix}/{_shorten(segment, MAX_SERVER_NAME - len(prefix) - 1)}"


def cluster_name_prefix(namespace: str, cluster_domain: str = "cluster.local") -> str:
    """The reverse-DNS server-name prefix of a namespace: `local.cluster.svc.<namespace>`.

    What the registry names an agent's server by default (`<prefix>/<agent>`) and what the agent's
    own Server Card says, so the two agree.
    """
    return ".".join([*reversed(cluster_domain.split(".")), "svc", namespace])


def server_card_url(mcp_url: str) -> str:
    """Where the Server Card of the agent at `mcp_url` is served: `<mcp-url>/server-card`."""
    return mcp_url.rstrip("/") + SERVER_CARD_SUFFIX


def mcp_url_of_a2a(a2a: str) -> str:
    """The MCP endpoint beside an agent's A2A one (the inverse of `a2a_url`)."""
    return a2a.rstrip("/").removesuffix(A2A_PATH) + "/mcp"


def agent_identity(namespace: str, deployment: str, agent: str, uid: str | None = None) -> str:
    """What keys an agent's conversations in a store shared by deployments and namespaces.

    The UID (in a cluster) makes a re-created agent of the same name a new one: it starts with no
    conversations. `pallas run` has no UID, so a re-run of the same manifests continues.
    """
    identity = f"{namespace}/{deployment}/{agent}"
    return f"{identity}/{uid}" if uid else identity


def agents_service_account(deployment: str) -> str:
    """The ServiceAccount agents of a deployment run as in `auth.mode: kubernetes`."""
    return f"{deployment}-agents"


def auth_delegation_binding(namespace: str, deployment: str) -> str:
    """The ClusterRoleBinding letting those agents create TokenReviews and SubjectAccessReviews."""
    return f"pallas:{namespace}:{deployment}:auth-delegator"


def network_policy_name(deployment: str) -> str:
    """The NetworkPolicy guarding a deployment's agents (`spec.network.policy`)."""
    return f"{deployment}-agents"


def bridges_network_policy_name(deployment: str) -> str:
    """The NetworkPolicy guarding a deployment's hosted stdio servers' bridges (`spec.network.policy`)."""
    return f"{deployment}-mcp-servers"


def registry_base_url(deployment: str, namespace: str, port: int) -> str:
    """The in-cluster root URL of a deployment's registry (ends with `/`)."""
    return f"http://{registry_name(deployment)}.{namespace}.svc.cluster.local:{port}/"


def registry_url(deployment: str, namespace: str, port: int) -> str:
    """The in-cluster catalogue URL of a deployment's registry."""
    return registry_base_url(deployment, namespace, port) + ".well-known/mcp/server.json"
