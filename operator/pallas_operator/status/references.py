"""Checks of what an agent refers to: its deployment, other agents, and cycles.

The checks of names (deployment, agents, cycles) live in `pallas_api.references`, shared with
`pallas validate`. Secrets are not checked here: the operator reads none, and an agent pod says
which of its secrets have no value (`get_health`'s `missingSecrets`, a Healthy reason).

A failed check is a `Problem`: the reason of `Accepted=False` and a message naming the missing
thing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pallas_api.references import Problem, check_references
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec

# render_agent's reasons (ProviderNotFound, ServerNotFound, AgentNotFound) pass through as they are.
__all__ = ["AgentFacts", "Problem", "check_agent", "waiting_for"]


@dataclass(frozen=True, slots=True)
class AgentFacts:
    """What the operator knows of another agent of the namespace."""

    name: str
    deployment: str
    dependencies: tuple[str, ...]
    ready: bool
    port: int


def check_agent(
    name: str,
    spec: PallasAgentSpec,
    deployment: PallasDeploymentSpec | None,
    agents: Mapping[str, AgentFacts],
) -> Problem | None:
    """The first problem with the agent's references (the checks `pallas validate` runs too)."""
    return check_references(name, spec, deployment, _Dependencies(agents), _Homes(agents))


class _Dependencies(Mapping[str, tuple[str, ...]]):
    """Each agent's dependencies, read only when looked up.

    The checks look up a handful of agents; building the whole namespace's graph for each
    reconcile made a start-up over N agents cost O(N²).
    """

    def __init__(self, agents: Mapping[str, AgentFacts]) -> None:
        self._agents = agents

    def __getitem__(self, name: str) -> tuple[str, ...]:
        return self._agents[name].dependencies

    def __iter__(self) -> Iterator[str]:
        return iter(self._agents)

    def __len__(self) -> int:
        return len(self._agents)


class _Homes(Mapping[str, str]):
    """Each agent's deployment, read only when looked up (as `_Dependencies`)."""

    def __init__(self, agents: Mapping[str, AgentFacts]) -> None:
        self._agents = agents

    def __getitem__(self, name: str) -> str:
        return self._agents[name].deployment

    def __iter__(self) -> Iterator[str]:
        return iter(self._agents)

    def __len__(self) -> int:
        return len(self._agents)


def waiting_for(spec: PallasAgentSpec, agents: Mapping[str, AgentFacts]) -> list[str]:
    """The agent's dependencies that are not Ready yet."""
    return [a for a in spec.dependencies() if not (a in agents and agents[a].ready)]
