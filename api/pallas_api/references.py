"""Checks of what an agent refers to: its deployment, the other agents, and dependency cycles.

Pure and shared: the operator runs them over what the API server holds, `pallas validate` over
the objects of the files it reads. A failed check is a `Problem`: the reason of the agent's
`Accepted=False` and a message naming the missing thing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pallas_api import names
from pallas_api.conditions import (
    AGENT_NOT_FOUND,
    DEPENDENCY_CYCLE,
    DEPLOYMENT_NOT_FOUND,
    NAME_CONFLICT,
    SERVER_NOT_FOUND,
    STEP_OUTSIDE_DEPLOYMENT,
)

if TYPE_CHECKING:  # only annotations here: the agent imports this module, and the CRD models cost
    # it ~0.3 s of its start (issue 53); the operator and `pallas validate` have them anyway.
    from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec

DependencyGraph = Mapping[str, Sequence[str]]
"""The agents of one namespace by name, each with its dependencies (`agents` and `dependsOn`)."""

Homes = Mapping[str, str]
"""The agents of one namespace by name, each with the name of its PallasDeployment."""


@dataclass(frozen=True, slots=True)
class Problem:
    """Why an agent cannot be accepted."""

    reason: str
    message: str


def listing(items: Iterable[str]) -> str:
    """Names sorted and joined by ", ", for messages."""
    return ", ".join(sorted(items))


def agents_not_found(missing: Iterable[str]) -> Problem:
    """The problem of an agent whose `agents` or `dependsOn` name PallasAgents that do not exist.

    The one wording of it: `check_references` reports it, and `render_agent` raises it for a peer
    it has no URL of.
    """
    return Problem(AGENT_NOT_FOUND, f"PallasAgents not found in this namespace: {listing(missing)}")


def servers_not_found(missing: Iterable[str]) -> Problem:
    """The warning of an agent whose `servers` name MCP servers its deployment does not define.

    Not a reason to refuse the agent (the gateway seed's rule): it runs on the servers that
    exist. The one wording of it: the operator's `Accepted` condition and Event, `pallas run`'s
    and `pallas validate`'s warning, and the agent's `get_health` say it.
    """
    return Problem(
        SERVER_NOT_FOUND,
        f"mcpServers {listing(missing)} not defined by the deployment: the agent runs without them",
    )


def find_cycle(name: str, dependencies: Sequence[str], graph: DependencyGraph) -> list[str] | None:
    """A dependency path from `name` back to itself (`[name, ..., name]`), if there is one."""
    stack: list[tuple[str, list[str]]] = [(dep, [name, dep]) for dep in reversed(dependencies)]
    seen: set[str] = set()
    while stack:
        current, path = stack.pop()
        if current == name:
            return path
        if current in seen or current not in graph:
            continue
        seen.add(current)
        stack.extend((dep, [*path, dep]) for dep in reversed(graph[current]))
    return None


def steps_elsewhere(spec: PallasAgentSpec, homes: Homes) -> Problem | None:
    """The problem of a workflow whose steps are PallasAgents of another deployment.

    A step is called as a peer of the same deployment (its registry, auth and providers); one
    of another deployment would be reached with credentials and a policy it does not share.
    """
    if spec.workflow is None:
        return None
    external = set(spec.a2a_agents)
    elsewhere = [
        f"step {step!r} is an agent of deployment {homes[step]!r}"
        for step in spec.workflow.steps()
        if step not in external and step in homes and homes[step] != spec.deployment
    ]
    if not elsewhere:
        return None
    return Problem(
        STEP_OUTSIDE_DEPLOYMENT,
        f"workflow steps must be PallasAgents of this agent's deployment {spec.deployment!r}: "
        + ", ".join(elsewhere),
    )


def check_references(
    name: str,
    spec: PallasAgentSpec,
    deployment: PallasDeploymentSpec | None,
    graph: DependencyGraph,
    homes: Homes,
) -> Problem | None:
    """The first problem with the agent's references, in the order a user would fix them.

    Args:
        name: The agent's name.
        spec: Its spec.
        deployment: The spec of its PallasDeployment, None when there is none of that name.
        graph: Every agent of the namespace (this one included) with its dependencies.
        homes: Every agent of the namespace with its deployment's name (for workflow steps).
    """
    if deployment is None:
        return Problem(
            DEPLOYMENT_NOT_FOUND, f"PallasDeployment {spec.deployment!r} not found in this namespace"
        )
    if name == names.registry_name(spec.deployment):
        return Problem(
            NAME_CONFLICT, f"the name {name!r} is taken by the registry of deployment {spec.deployment!r}"
        )
    hosted = {
        names.stdio_server_name(spec.deployment, key): key for key, server in deployment.mcp_servers.items()
    }
    if name in hosted and deployment.mcp_servers[hosted[name]].stdio is not None:
        return Problem(
            NAME_CONFLICT,
            f"the name {name!r} is taken by stdio server {hosted[name]!r} of deployment {spec.deployment!r}",
        )
    missing = [a for a in spec.dependencies() if a not in graph]
    if missing:
        return agents_not_found(missing)
    elsewhere = steps_elsewhere(spec, homes)
    if elsewhere is not None:
        return elsewhere
    cycle = find_cycle(name, spec.dependencies(), graph)
    if cycle:
        return Problem(DEPENDENCY_CYCLE, "agents and dependsOn form a cycle: " + " -> ".join(cycle))
    return None
