"""Checks of what an agent refers to: its deployment, other agents, Secrets, and cycles.

A failed check is a `Problem`: the reason of `Accepted=False` and a message naming the missing
thing. Only names ever appear in messages, never a Secret's content.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pallas_api import names
from pallas_api.conditions import (
    AGENT_NOT_FOUND,
    DEPENDENCY_CYCLE,
    DEPLOYMENT_NOT_FOUND,
    NAME_CONFLICT,
    SECRET_KEY_NOT_FOUND,
    SECRET_NOT_FOUND,
)
from pallas_api.render import SecretBinding
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec

# render_agent's reasons (ProviderNotFound, ServerNotFound, AgentNotFound) pass through as they are.


@dataclass(frozen=True, slots=True)
class Problem:
    """Why an agent cannot be accepted."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class AgentFacts:
    """What the operator knows of another agent of the namespace."""

    name: str
    deployment: str
    dependencies: tuple[str, ...]
    ready: bool
    port: int


def _listing(items: Iterable[str]) -> str:
    return ", ".join(sorted(items))


def find_cycle(name: str, dependencies: Sequence[str], agents: Mapping[str, AgentFacts]) -> list[str] | None:
    """A dependency path from `name` back to itself (`[name, ..., name]`), if there is one."""
    stack: list[tuple[str, list[str]]] = [(dep, [name, dep]) for dep in reversed(dependencies)]
    seen: set[str] = set()
    while stack:
        current, path = stack.pop()
        if current == name:
            return path
        if current in seen or current not in agents:
            continue
        seen.add(current)
        stack.extend((dep, [*path, dep]) for dep in reversed(agents[current].dependencies))
    return None


def check_agent(
    name: str,
    spec: PallasAgentSpec,
    deployment: PallasDeploymentSpec | None,
    agents: Mapping[str, AgentFacts],
) -> Problem | None:
    """The first problem with the agent's references, in the order a user would fix them."""
    if deployment is None:
        return Problem(
            DEPLOYMENT_NOT_FOUND, f"PallasDeployment {spec.deployment!r} not found in this namespace"
        )
    if name == names.registry_name(spec.deployment):
        return Problem(
            NAME_CONFLICT, f"the name {name!r} is taken by the registry of deployment {spec.deployment!r}"
        )
    missing = [a for a in spec.dependencies() if a not in agents]
    if missing:
        return Problem(AGENT_NOT_FOUND, f"PallasAgents not found in this namespace: {_listing(missing)}")
    cycle = find_cycle(name, spec.dependencies(), agents)
    if cycle:
        return Problem(DEPENDENCY_CYCLE, "agents and dependsOn form a cycle: " + " -> ".join(cycle))
    return None


def check_secrets(
    bindings: Iterable[SecretBinding], secrets: Mapping[str, Mapping[str, str]]
) -> Problem | None:
    """Every Secret key the agent's pods will read must exist, or the pods could never start."""
    missing_secrets = sorted({b.ref.name for b in bindings if b.ref.name not in secrets})
    if missing_secrets:
        return Problem(SECRET_NOT_FOUND, f"Secrets not found in this namespace: {_listing(missing_secrets)}")
    missing_keys = sorted(
        {f"{b.ref.name}/{b.ref.key}" for b in bindings if b.ref.key not in secrets[b.ref.name]}
    )
    if missing_keys:
        return Problem(SECRET_KEY_NOT_FOUND, f"Secret keys not found: {_listing(missing_keys)}")
    return None


def waiting_for(spec: PallasAgentSpec, agents: Mapping[str, AgentFacts]) -> list[str]:
    """The agent's dependencies that are not Ready yet."""
    return [a for a in spec.dependencies() if not (a in agents and agents[a].ready)]
