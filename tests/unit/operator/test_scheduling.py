"""Losing a node: agent replicas spread over nodes, and pods leave a failed node within seconds.

`spec.pod.topologySpreadConstraints` (unset: a preferred spread over hostnames with more than one
replica) and `spec.runtime.nodeFailureTolerationSeconds` (unset: the operator's default, 30 s)
reach the agent's and the registry's pod templates as Kubernetes fields.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from pydantic import ValidationError

from pallas_api import names
from pallas_api.render import render_agent
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_operator.builders import AgentWorkload, Owner, agent_deployment, registry_children
from pallas_operator.cli import OperatorCommand
from tests.support.operator import Mod, agent, at, deployment, spec

OWNER = Owner(names.AGENT_KIND, "research", "agents", "uid-agent")
DEPLOYMENT_OWNER = Owner(names.DEPLOYMENT_KIND, "ouranos", "agents", "uid-deployment")
AGENT_SELECTOR = {"pallas.dev/agent": "research", "app.kubernetes.io/component": "agent"}
DEFAULT_SPREAD = {
    "maxSkew": 1,
    "topologyKey": "kubernetes.io/hostname",
    "whenUnsatisfiable": "ScheduleAnyway",
    "labelSelector": {"matchLabels": AGENT_SELECTOR},
    "matchLabelKeys": ["pod-template-hash"],
}


def node_failure(seconds: int) -> list[dict[str, Any]]:
    return [
        {"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for taint in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    ]


def _deployment(*mods: Mod) -> PallasDeploymentSpec:
    return PallasDeploymentSpec.model_validate(deployment("ouranos", *mods)["spec"])


def _agent(*mods: Mod) -> PallasAgentSpec:
    return PallasAgentSpec.model_validate(agent("research", *mods)["spec"])


def pod(agent_mods: tuple[Mod, ...] = (), dep_mods: tuple[Mod, ...] = (), **workload: Any) -> dict[str, Any]:
    """The agent's pod spec as the builder makes it."""
    agent_spec, dep = _agent(*agent_mods), _deployment(*dep_mods)
    rendered = render_agent("research", agent_spec, dep, {})
    w = AgentWorkload(OWNER, "ouranos", agent_spec, dep, rendered.secrets, "hash", "pallas:test", **workload)
    out: dict[str, Any] = agent_deployment(w)["spec"]["template"]["spec"]
    return out


def registry_pod(*dep_mods: Mod, **kwargs: Any) -> dict[str, Any]:
    manifest = registry_children(DEPLOYMENT_OWNER, _deployment(*dep_mods), "pallas:test", **kwargs)[-1]
    out: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return out


# --- spreading over nodes ----------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [2, 5])
def test_replicas_spread_over_nodes_by_default_preferred_not_required(replicas: int) -> None:
    # ScheduleAnyway: a one-node cluster still runs every replica; pod-template-hash keeps a
    # rollout's new pods from being counted with the old ones about to go.
    assert pod((spec(replicas=replicas),))["topologySpreadConstraints"] == [DEFAULT_SPREAD]


@pytest.mark.parametrize("replicas", [0, 1])
def test_one_replica_has_no_spread_constraint(replicas: int) -> None:
    assert "topologySpreadConstraints" not in pod((spec(replicas=replicas),))


def test_a_spec_list_replaces_the_default_and_counts_the_agents_pods_without_a_selector() -> None:
    zones = {"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
             "minDomains": 3, "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Ignore",
             "matchLabelKeys": ["pod-template-hash"]}  # fmt: skip
    team = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"team": "ml"},
                              "matchExpressions": [{"key": "tier", "operator": "Exists"}]}}  # fmt: skip
    got = pod((spec(replicas=3), at("spec.pod.topologySpreadConstraints", [zones, team])))
    assert got["topologySpreadConstraints"] == [
        {**zones, "labelSelector": {"matchLabels": AGENT_SELECTOR}},
        team,
    ]


def test_a_spec_list_applies_with_one_replica_too() -> None:
    zone = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
    got = pod((at("spec.pod.topologySpreadConstraints", [zone]),))
    assert got["topologySpreadConstraints"] == [{**zone, "labelSelector": {"matchLabels": AGENT_SELECTOR}}]


def test_an_empty_list_removes_the_default() -> None:
    assert "topologySpreadConstraints" not in pod(
        (spec(replicas=3), at("spec.pod.topologySpreadConstraints", []))
    )


def test_the_pod_template_is_the_same_on_every_build() -> None:
    # Server-side apply compares what it is given: equal inputs must give equal fields.
    mods = (spec(replicas=3), at("spec.pod.tolerations", [{"key": "gpu", "operator": "Exists"}]))
    assert pod(mods) == pod(mods)


HOSTNAME = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}


@pytest.mark.parametrize(
    ("constraints", "message"),
    [
        ([{**HOSTNAME, "maxSkew": 0}], "maxSkew"),
        ([{**HOSTNAME, "topologyKey": "not a key"}], "topologyKey"),
        ([{**HOSTNAME, "whenUnsatisfiable": "Sometimes"}], "whenUnsatisfiable"),
        ([{k: v for k, v in HOSTNAME.items() if k != "topologyKey"}], "topologyKey"),
        ([{**HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}], "minDomains needs"),
        ([{**HOSTNAME, "nodeTaintsPolicy": "Maybe"}], "nodeTaintsPolicy"),
        ([HOSTNAME, {**HOSTNAME, "maxSkew": 2}], "two constraints with topologyKey 'kubernetes.io/hostname'"),
        ([{**HOSTNAME, "matchLabelKeys": ["pallas.dev/agent"]}], "also a key of the label selector"),
        (
            [{**HOSTNAME, "labelSelector": {"matchLabels": {"a": "b"}}, "matchLabelKeys": ["a"]}],
            "'a' is also",
        ),
        ([{**HOSTNAME, "matchLabelKeys": ["x", "x"]}], "duplicate value"),
        ([{**HOSTNAME, "topologyKey": f"zone-{i}"} for i in range(9)], "at most 8"),
    ],
)
def test_constraints_the_api_server_would_refuse_are_refused(constraints: Any, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _agent(at("spec.pod.topologySpreadConstraints", constraints))


def test_the_same_topology_may_be_both_required_and_preferred() -> None:
    # The pod spec's list is keyed by (topologyKey, whenUnsatisfiable), not by topologyKey alone.
    both = [HOSTNAME, {**HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway", "maxSkew": 2}]
    assert len(pod((at("spec.pod.topologySpreadConstraints", both),))["topologySpreadConstraints"]) == 2


# --- leaving a failed node ---------------------------------------------------------------------


def test_pods_leave_a_failed_node_after_30_seconds_by_default() -> None:
    # Kubernetes' DefaultTolerationSeconds would add 300 s; explicit tolerations replace it.
    assert pod()["tolerations"] == node_failure(30)


def test_the_operators_default_and_the_deployments_field_set_the_seconds() -> None:
    assert pod(node_failure_seconds=90)["tolerations"] == node_failure(90)
    field = at("spec.runtime.nodeFailureTolerationSeconds", 0)  # 0: evicted as soon as tainted
    assert pod(dep_mods=(field,), node_failure_seconds=90)["tolerations"] == node_failure(0)


def test_the_users_toleration_for_a_taint_wins_and_others_stay() -> None:
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    unreachable = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                   "tolerationSeconds": 600}  # fmt: skip
    got = pod((at("spec.pod.tolerations", [gpu, unreachable]),))["tolerations"]
    assert got == [gpu, unreachable, node_failure(30)[1]]


@pytest.mark.parametrize(
    "toleration",
    [
        {"operator": "Exists"},  # every taint, for ever
        {"key": "", "operator": "Exists", "effect": "NoExecute"},
    ],
)
def test_a_toleration_of_every_taint_is_not_cut_short_by_ours(toleration: dict[str, Any]) -> None:
    # Kubernetes evicts after the shortest tolerationSeconds of the matching tolerations.
    assert pod((at("spec.pod.tolerations", [toleration]),))["tolerations"] == [toleration]


def test_a_toleration_of_the_taint_for_another_effect_does_not_count() -> None:
    no_schedule = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}
    assert pod((at("spec.pod.tolerations", [no_schedule]),))["tolerations"] == [
        no_schedule,
        *node_failure(30),
    ]


@pytest.mark.parametrize("seconds", [-1, 3601])
def test_seconds_outside_zero_to_an_hour_are_refused(seconds: int) -> None:
    with pytest.raises(ValidationError, match="nodeFailureTolerationSeconds"):
        _deployment(at("spec.runtime.nodeFailureTolerationSeconds", seconds))


# --- the registry ------------------------------------------------------------------------------


def test_the_registry_leaves_a_failed_node_as_the_agents_do_and_runs_one_pod_unspread() -> None:
    assert registry_pod()["tolerations"] == node_failure(30)
    assert registry_pod(node_failure_seconds=45)["tolerations"] == node_failure(45)
    field = at("spec.runtime.nodeFailureTolerationSeconds", 120)
    assert registry_pod(field, node_failure_seconds=45)["tolerations"] == node_failure(120)
    manifest = registry_children(DEPLOYMENT_OWNER, _deployment(), "pallas:test")[-1]
    assert manifest["spec"]["replicas"] == 1
    assert "topologySpreadConstraints" not in manifest["spec"]["template"]["spec"]


# --- the operator's flag -----------------------------------------------------------------------


def test_the_operator_flag_defaults_to_30_and_takes_zero_to_an_hour() -> None:
    parser = argparse.ArgumentParser()
    OperatorCommand().configure(parser)
    assert parser.parse_args([]).node_failure_toleration_seconds == 30
    assert parser.parse_args(["--node-failure-toleration-seconds=0"]).node_failure_toleration_seconds == 0
    for bad in ("3601", "-1", "1.5"):
        with pytest.raises(SystemExit):
            parser.parse_args([f"--node-failure-toleration-seconds={bad}"])
