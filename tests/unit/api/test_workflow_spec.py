"""`spec.workflow`: one shape, steps as implied dependencies, checked as `agents` are."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pallas_api import crds
from pallas_api.checks import Document, check_documents
from pallas_api.spec import PallasAgentSpec
from tests.support.operator import agent, deployment, spec


def _lines(*manifests: object) -> list[str]:
    report = check_documents([Document(f"m.yaml:{i}", m) for i, m in enumerate(manifests, start=1)])
    return [str(p) for p in report.problems]


def test_steps_are_called_peers_and_dependencies_but_a2a_steps_are_not() -> None:
    parsed = PallasAgentSpec.model_validate(
        {
            "deployment": "d",
            "agents": ["helper"],
            "a2aAgents": ["outside"],
            "dependsOn": ["db"],
            "workflow": {"router": {"routes": ["writer", "outside"], "fallback": "helper"}},
        }
    )
    assert parsed.workflow is not None
    assert parsed.workflow.type == "router"
    assert parsed.peers() == ["helper", "writer"]
    assert parsed.dependencies() == ["helper", "writer", "db"]


@pytest.mark.parametrize(
    ("workflow", "error"),
    [
        ({}, "exactly one of chain, parallel, router, evaluator, planner \\(got none\\)"),
        ({"chain": {"steps": []}}, "at least 1 item"),
        ({"chain": {"steps": ["a", "a"]}}, "duplicate value 'a'"),
        ({"evaluator": {"generator": "a", "evaluator": "b", "minRating": "SUPERB"}}, "minRating"),
        ({"planner": {"agents": ["a"], "maxSteps": 0}}, "maxSteps"),
    ],
)
def test_malformed_workflows_are_refused_naming_what_is_wrong(workflow: object, error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        PallasAgentSpec.model_validate({"deployment": "d", "workflow": workflow})


def test_missing_steps_and_cycles_through_workflows_are_reported() -> None:
    lines = _lines(
        deployment(),
        agent("lost", spec(workflow={"chain": {"steps": ["ghost"]}})),
        agent("a", spec(workflow={"parallel": {"fanOut": ["b"]}})),
        agent("b", spec(agents=["a"])),
        agent("fine", spec(workflow={"evaluator": {"generator": "b2", "evaluator": "b3"}})),
        agent("b2"),
        agent("b3"),
    )
    assert lines[0] == (
        "m.yaml:2: PallasAgent/lost: spec.agents/dependsOn: PallasAgents not found in namespace "
        "'default' of the files: ghost"
    )
    assert (
        "m.yaml:3: PallasAgent/a: spec.agents/dependsOn: agents and dependsOn form a cycle: a -> b -> a"
        in lines
    )
    assert not [line for line in lines if "fine" in line]


def test_the_crd_shows_the_workflow_in_wide_output() -> None:
    columns = crds.agent_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    workflow = next(c for c in columns if c["name"] == "Workflow")
    assert (workflow["jsonPath"], workflow["priority"]) == (".status.workflow", 1)


def test_a_step_of_another_deployment_is_refused_naming_the_step_and_its_deployment() -> None:
    lines = _lines(
        deployment(),
        deployment("elsewhere"),
        agent("flow", spec(workflow={"chain": {"steps": ["near", "far"]}})),
        agent("near"),
        agent("far", spec(deployment="elsewhere")),
        agent("peer", spec(agents=["far"])),  # a peer of another deployment stays allowed
    )
    assert lines == [
        "m.yaml:3: PallasAgent/flow: spec.workflow: workflow steps must be PallasAgents of this "
        "agent's deployment 'ouranos': step 'far' is an agent of deployment 'elsewhere'"
    ]
