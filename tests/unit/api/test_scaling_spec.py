"""`spec.scaling` (issue 53): the deployment's default, the agent's override, and `replicas` a fixed size."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from pallas_api.spec import PallasAgentSpec
from pallas_api.spec.common import ScalingSpec

DEFAULT = ScalingSpec(min_replicas=0, max_replicas=3, idle_seconds=600)


def agent(**fields: Any) -> PallasAgentSpec:
    return PallasAgentSpec.model_validate({"deployment": "d", "instruction": "hi", **fields})


def test_replicas_and_scaling_together_are_refused_saying_which_to_remove() -> None:
    with pytest.raises(ValidationError, match=r"set either replicas .* or scaling .*, not both; remove one"):
        agent(replicas=2, scaling={"maxReplicas": 3})


def test_an_agent_without_either_follows_its_deployments_scaling() -> None:
    assert agent().scaling_with(DEFAULT) == DEFAULT
    assert agent().scaling_with(None) is None
    assert agent().fixed_replicas == 1


def test_an_agents_replicas_is_a_fixed_size_over_the_deployments_scaling() -> None:
    spec = agent(replicas=3)
    assert (spec.scaling_with(DEFAULT), spec.fixed_replicas) == (None, 3)


def test_an_agents_scaling_replaces_the_deployments_whole() -> None:
    spec = agent(scaling={"minReplicas": 1, "targetInFlight": 8})
    assert spec.scaling_with(DEFAULT) == ScalingSpec(
        min_replicas=1, max_replicas=5, idle_seconds=900, target_in_flight=8
    )
