"""Reading PallasDeployment / PallasAgent / PallasTrigger / Secret manifests and planning a local run.

`pallas run -f` uses this to run the same manifests users apply to Kubernetes: the specs are
validated with the same models and rendered with the same `render_agent` as the operator's.
Errors name the file, the object and the field, in one line.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets as random_tokens
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from pallas_api import names
from pallas_api.checks import reference_problem
from pallas_api.fields import SessionLimits
from pallas_api.render import RenderedAgent, RenderError, env_name, render_agent
from pallas_api.spec import McpServerSpec, PallasAgentSpec, PallasDeploymentSpec, PallasTriggerSpec, StdioSpec
from pallas_api.validation import describe

PALLAS_API = names.API_VERSION_STRING
LOOPBACK = "127.0.0.1"


_BRIDGE_TOKENS: dict[tuple[str, str], str] = {}


def bridge_token(namespace: str, deployment: str) -> str:
    """The run's bridge credential of a deployment: random, made at first use, kept in memory only.

    The same for the run's whole life (a `--reload` keeps its bridges, so their credential);
    every deployment has its own, as in a cluster (`names.bridge_token_secret_name`).
    """
    return _BRIDGE_TOKENS.setdefault((namespace, deployment), random_tokens.token_urlsafe(32))


class ManifestError(Exception):
    """A manifest that cannot be run; the text names file, object and field."""


@dataclass(frozen=True, slots=True)
class Resource:
    """One document of a manifest file: where it came from and what it says."""

    kind: str
    namespace: str
    name: str
    source: str
    """`FILE` or `FILE#N` (N = 1-based document index), for messages."""


@dataclass(frozen=True, slots=True)
class DeploymentManifest(Resource):
    """A PallasDeployment manifest, validated."""

    spec: PallasDeploymentSpec


@dataclass(frozen=True, slots=True)
class AgentManifest(Resource):
    """A PallasAgent manifest, validated."""

    spec: PallasAgentSpec


@dataclass(frozen=True, slots=True)
class TriggerManifest(Resource):
    """A PallasTrigger manifest, validated."""

    spec: PallasTriggerSpec


@dataclass
class Manifests:
    """Everything the files hold: deployments, agents, triggers and Secrets."""

    deployments: dict[tuple[str, str], DeploymentManifest] = field(default_factory=dict)
    agents: list[AgentManifest] = field(default_factory=list)
    triggers: list[TriggerManifest] = field(default_factory=list)
    secrets: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    """Objects of other kinds, as `FILE: Kind/name`, so the command can say it skipped them."""


def _where(source: str, kind: str, name: str) -> str:
    return f"{source}: {kind}/{name}"


def _validate(model: type[BaseModel], data: object, where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ManifestError(f"{where}: {describe(exc, prefix='spec', limit=1)}") from None


def _secret_data(doc: Mapping[str, Any], where: str) -> dict[str, str]:
    data: dict[str, str] = {}
    for key, value in (doc.get("data") or {}).items():
        try:
            data[key] = base64.b64decode(str(value), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise ManifestError(f"{where}: data.{key}: not base64-encoded UTF-8 text") from None
    data.update({k: str(v) for k, v in (doc.get("stringData") or {}).items()})
    return data


def _add(manifests: Manifests, doc: object, source: str) -> None:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise ManifestError(f"{source}: a manifest must be a mapping with apiVersion, kind and metadata")
    kind, api = doc.get("kind"), doc.get("apiVersion")
    raw_metadata = doc.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    name = metadata.get("name")
    if not isinstance(kind, str) or not isinstance(name, str) or not name:
        raise ManifestError(f"{source}: every object needs kind and metadata.name")
    namespace = str(metadata.get("namespace") or "default")
    where = _where(source, kind, name)
    if kind in ("PallasDeployment", "PallasAgent", "PallasTrigger") and api != PALLAS_API:
        raise ManifestError(f"{where}: apiVersion must be {PALLAS_API} (got {api!r})")
    if kind == "PallasDeployment":
        spec = _validate(PallasDeploymentSpec, doc.get("spec"), where)
        if (namespace, name) in manifests.deployments:
            raise ManifestError(f"{where}: defined twice")
        manifests.deployments[namespace, name] = DeploymentManifest(kind, namespace, name, source, spec)
    elif kind == "PallasAgent":
        spec = _validate(PallasAgentSpec, doc.get("spec"), where)
        if any(a.namespace == namespace and a.name == name for a in manifests.agents):
            raise ManifestError(f"{where}: defined twice")
        manifests.agents.append(AgentManifest(kind, namespace, name, source, spec))
    elif kind == "PallasTrigger":
        spec = _validate(PallasTriggerSpec, doc.get("spec"), where)
        if any(t.namespace == namespace and t.name == name for t in manifests.triggers):
            raise ManifestError(f"{where}: defined twice")
        manifests.triggers.append(TriggerManifest(kind, namespace, name, source, spec))
    elif kind == "Secret" and api == "v1":
        manifests.secrets[namespace, name] = _secret_data(doc, where)
    else:
        manifests.ignored.append(where)


def load_manifests(paths: Sequence[str | Path]) -> Manifests:
    """Read every YAML document of every file, in order."""
    manifests = Manifests()
    for path in map(Path, paths):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except OSError as exc:
            raise ManifestError(f"{path}: cannot read ({exc.strerror})") from None
        except yaml.YAMLError as exc:
            raise ManifestError(f"{path}: not valid YAML: {exc}".replace("\n", " ")) from None
        for index, doc in enumerate(docs, start=1):
            _add(manifests, doc, f"{path}#{index}" if len(docs) > 1 else str(path))
    if not manifests.agents:
        raise ManifestError(f"{', '.join(map(str, paths))}: no PallasAgent to run")
    return manifests


@dataclass(frozen=True, slots=True)
class PlannedAgent:
    """One agent `pallas run` will serve: its manifests, port, config and environment."""

    manifest: AgentManifest
    deployment: DeploymentManifest
    port: int
    rendered: RenderedAgent
    environ: dict[str, str]
    """The process environment plus this agent's secret variables."""
    unresolved: tuple[str, ...] = ()
    """Secret references with no value (no Secret manifest key, no environment variable)."""

    @property
    def url(self) -> str:
        """The agent's loopback MCP URL."""
        return f"http://{LOOPBACK}:{self.port}/mcp"


MAX_BRIDGE_SESSIONS = 100_000
"""The most HTTP sessions a bridge keeps (`sessions.maxSessions`' own bound)."""

BridgeKey = tuple[str, str, str]
"""A stdio server's (namespace, deployment, server name)."""


@dataclass(frozen=True, slots=True)
class PlannedBridge:
    """A stdio server `pallas run` hosts: the command, and the loopback port of its bridge."""

    key: BridgeKey
    port: int
    stdio: StdioSpec
    env: dict[str, str]
    """Its `stdio.env`, Secret values resolved (the child also gets PATH, HOME and the like)."""
    stateful: bool
    limits: SessionLimits
    """The bridge's HTTP sessions: each agent using it keeps up to `sessions.maxSessions`
    conversation sessions and one shared session, so the bridge keeps that many per agent."""
    secrets: dict[str, str] = field(default_factory=dict)
    """The values from Secrets, by a variable name of the run's own (kept out of the logs)."""
    unresolved: tuple[str, ...] = ()
    """Secret references with no value (no Secret manifest key, no environment variable)."""
    token: str = field(default="", repr=False)
    """The credential the deployment's agents send (`bridge_token`); never shown."""

    @property
    def name(self) -> str:
        """The server's name (its `mcpServers` key)."""
        return self.key[2]

    @property
    def url(self) -> str:
        """The bridge's loopback MCP URL."""
        return f"http://{LOOPBACK}:{self.port}/mcp"


@dataclass(frozen=True, slots=True)
class LocalPlan:
    """What `pallas run` serves: the agents in start order and the registry's port."""

    agents: list[PlannedAgent]
    """In start order: every agent after the agents it depends on."""
    registry_port: int | None
    provider_keys: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """(namespace, deployment, provider) → API key of every provider of the run's deployments
    that has one (the registry checks them all, used by an agent or not)."""
    openai_base_url: str | None = None
    """`$OPENAI_BASE_URL` when it applies (see `commands.run.env_files.with_openai_base_url`)."""
    bridges: list[PlannedBridge] = field(default_factory=list)
    """The stdio servers the agents use, each behind a bridge (started before the agents)."""


AgentKey = tuple[str, str]
"""An agent's (namespace, name)."""


def agent_ports(
    agents: Sequence[AgentManifest],
    base_port: int,
    keep: Mapping[AgentKey, int] | None = None,
    avoid: Collection[int] = (),
) -> dict[AgentKey, int]:
    """Each agent's port: the one in `keep` (a running agent's), else the next free after base.

    With nothing kept the agents get base+1, base+2… in manifest order.

    Raises:
        ManifestError: the ports would pass 65535.
    """
    keys = [(a.namespace, a.name) for a in agents]
    ports = {key: (keep or {})[key] for key in keys if key in (keep or {})}
    taken = set(ports.values()) | set(avoid)
    candidate = base_port
    for key in keys:
        if key in ports:
            continue
        candidate += 1
        while candidate in taken:
            candidate += 1
        ports[key] = candidate
    if max(ports.values()) > 65535:
        raise ManifestError(f"--base-port {base_port} leaves no room for {len(ports)} agents below 65536")
    return ports


def plan_local(
    manifests: Manifests,
    base_port: int,
    only_agent: str | None = None,
    environ: Mapping[str, str] | None = None,
    keep_ports: Mapping[AgentKey, int] | None = None,
    keep_bridge_ports: Mapping[BridgeKey, int] | None = None,
) -> LocalPlan:
    """Ports (registry on base, agents on base+1…, then stdio servers' bridges), configs, start order.

    Agents get their ports in manifest order, the bridges of the stdio servers they use the
    ports after them.

    `keep_ports` and `keep_bridge_ports` are the ports of agents and bridges already running
    (`pallas run --reload`): they keep them, and new ones take the free ports after the base.
    """
    env = dict(os.environ if environ is None else environ)
    ports = agent_ports(
        manifests.agents, base_port, keep_ports, avoid=set((keep_bridge_ports or {}).values())
    )
    by_key = {(a.namespace, a.name): a for a in manifests.agents}
    graph = {}
    for agent in manifests.agents:
        where = _where(agent.source, agent.kind, agent.name)
        deployment = manifests.deployments.get((agent.namespace, agent.spec.deployment))
        same_ns = [a for a in manifests.agents if a.namespace == agent.namespace]
        peers = {a.name: a.spec.dependencies() for a in same_ns}
        homes = {a.name: a.spec.deployment for a in same_ns}
        problem = reference_problem(
            agent.name, agent.spec, deployment.spec if deployment else None, peers, homes, agent.namespace
        )
        if problem is not None:  # the operator's own checks, so both say the same
            raise ManifestError(f"{where}: {': '.join(problem)}")
        graph[agent.namespace, agent.name] = {(agent.namespace, d) for d in agent.spec.dependencies()}
    order = list(TopologicalSorter(graph).static_order())  # acyclic: reference_problem said so

    run_agents = [by_key[key] for key in order if only_agent is None or by_key[key].name == only_agent]
    bridges = plan_bridges(manifests, run_agents, ports, env, keep_bridge_ports)
    bridge_urls = {bridge.key: bridge.url for bridge in bridges}
    planned = []
    for agent in run_agents:
        key = (agent.namespace, agent.name)
        deployment = manifests.deployments[agent.namespace, agent.spec.deployment]
        urls = {d: f"http://{LOOPBACK}:{ports[agent.namespace, d]}/mcp" for d in agent.spec.peers()}
        stdio_urls = {
            server: bridge_urls[agent.namespace, deployment.name, server]
            for server in agent.spec.servers
            if (agent.namespace, deployment.name, server) in bridge_urls
        }
        try:
            url = f"http://{LOOPBACK}:{ports[key]}/mcp"
            rendered = render_agent(
                agent.name, agent.spec, deployment.spec, urls, local=True, namespace=agent.namespace, url=url,
                stdio_urls=stdio_urls,
            )  # fmt: skip
        except RenderError as exc:
            raise ManifestError(f"{_where(agent.source, agent.kind, agent.name)}: {exc}") from None
        agent_env = dict(env)
        unresolved = []
        for binding in rendered.secrets:
            secret = manifests.secrets.get((agent.namespace, binding.ref.name), {})
            value = secret.get(binding.ref.key, env.get(binding.ref.key))
            if binding.env == names.BRIDGE_TOKEN_ENV:  # the run's own, never the user's
                value = bridge_token(agent.namespace, deployment.name)
            if value is not None:
                agent_env[binding.env] = value
            else:
                unresolved.append(f"secretKeyRef {binding.ref.name}/{binding.ref.key}")
        planned.append(PlannedAgent(agent, deployment, ports[key], rendered, agent_env, tuple(unresolved)))
    if only_agent is not None and not planned:
        have = ", ".join(a.name for a in manifests.agents)
        raise ManifestError(f"--agent {only_agent}: no such PallasAgent (have: {have})")
    keys = {}
    for run in planned:
        namespace, deployment = run.manifest.namespace, run.deployment
        for provider, provider_spec in deployment.spec.providers.items():
            if provider_spec.api_key is not None:
                ref = provider_spec.api_key.secret_key_ref
                value = manifests.secrets.get((namespace, ref.name), {}).get(ref.key, env.get(ref.key))
                if value:
                    keys[namespace, deployment.name, provider] = value
    return LocalPlan(planned, None if only_agent is not None else base_port, keys, bridges=bridges)


def secret_value(
    manifests: Manifests, namespace: str, ref_name: str, key: str, env: Mapping[str, str]
) -> str | None:
    """A Secret manifest's key, else the environment variable named by the key (None: neither)."""
    return manifests.secrets.get((namespace, ref_name), {}).get(key, env.get(key))


def plan_bridges(
    manifests: Manifests,
    agents: Sequence[AgentManifest],
    agent_ports_: Mapping[AgentKey, int],
    env: Mapping[str, str],
    keep: Mapping[BridgeKey, int] | None = None,
) -> list[PlannedBridge]:
    """A bridge for each stdio server the agents use, on the first free ports after the agents'.

    Raises:
        ManifestError: the ports would pass 65535.
    """
    users: dict[BridgeKey, int] = {}
    for agent in agents:
        deployment = manifests.deployments[agent.namespace, agent.spec.deployment]
        for server in agent.spec.servers:
            used = deployment.spec.mcp_servers.get(server)
            if used is not None and used.stdio is not None:
                key = (agent.namespace, deployment.name, server)
                users[key] = users.get(key, 0) + 1
    taken = set(agent_ports_.values()) | set((keep or {}).values())
    candidate = max([*agent_ports_.values(), *(keep or {}).values()], default=0)
    bridges = []
    for key in sorted(users):
        namespace, deployment_name, server = key
        port = (keep or {}).get(key)
        if port is None:
            candidate += 1
            while candidate in taken:
                candidate += 1
            port = candidate
            taken.add(port)
        if port > 65535:
            raise ManifestError(f"no port below 65536 is left for the bridge of stdio server {server}")
        spec: McpServerSpec = manifests.deployments[namespace, deployment_name].spec.mcp_servers[server]
        assert spec.stdio is not None  # chosen above
        values: dict[str, str] = {}
        secrets: dict[str, str] = {}
        unresolved = []
        for index, variable in enumerate(spec.stdio.env):
            if variable.value_from is None:
                values[variable.name] = variable.value or ""
                continue
            ref = variable.value_from.secret_key_ref
            value = secret_value(manifests, namespace, ref.name, ref.key, env)
            if value is None:
                unresolved.append(f"secretKeyRef {ref.name}/{ref.key}")
                continue
            values[variable.name] = value
            secrets[env_name("SERVER", server, "ENV", str(index))] = value
        limits = SessionLimits(
            max_sessions=min((spec.sessions.max_sessions + 1) * users[key], MAX_BRIDGE_SESSIONS),
            idle_timeout_seconds=spec.sessions.idle_timeout_seconds,
        )
        bridges.append(
            PlannedBridge(
                key,
                port,
                spec.stdio,
                values,
                spec.stateful,
                limits,
                secrets,
                tuple(unresolved),
                token=bridge_token(namespace, deployment_name),
            )
        )
    return bridges
