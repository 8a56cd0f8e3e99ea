"""Checks of what an agent refers to: its deployment, other agents, Secrets, and cycles.

The checks of names (deployment, agents, cycles) live in `pallas_api.references`, shared with
`pallas validate`; the Secret checks need the cluster's Secrets and stay here.

A failed check is a `Problem`: the reason of `Accepted=False` and a message naming the missing
thing. Only names ever appear in messages, never a Secret's content.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from pallas_api.conditions import SECRET_KEY_NOT_FOUND, SECRET_NOT_FOUND
from pallas_api.references import Problem, check_references, listing
from pallas_api.render import SecretBinding
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec

# render_agent's reasons (ProviderNotFound, ServerNotFound, AgentNotFound) pass through as they are.
__all__ = ["AgentFacts", "Problem", "check_agent", "check_secrets", "waiting_for"]


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
    return check_references(name, spec, deployment, _Dependencies(agents))


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


def check_secrets(
    bindings: Iterable[SecretBinding], secrets: Mapping[str, Mapping[str, str]]
) -> Problem | None:
    """Every Secret key the agent's pods will read must exist, or the pods could never start."""
    missing_secrets = sorted({b.ref.name for b in bindings if b.ref.name not in secrets})
    if missing_secrets:
        return Problem(SECRET_NOT_FOUND, f"Secrets not found in this namespace: {listing(missing_secrets)}")
    missing_keys = sorted(
        {f"{b.ref.name}/{b.ref.key}" for b in bindings if b.ref.key not in secrets[b.ref.name]}
    )
    if missing_keys:
        return Problem(SECRET_KEY_NOT_FOUND, f"Secret keys not found: {listing(missing_keys)}")
    return None


def waiting_for(spec: PallasAgentSpec, agents: Mapping[str, AgentFacts]) -> list[str]:
    """The agent's dependencies that are not Ready yet."""
    return [a for a in spec.dependencies() if not (a in agents and agents[a].ready)]
