"""The offline checks of `pallas validate`: the API server's refusals, references and cycles."""

from __future__ import annotations

import pytest

from pallas_api import crds
from pallas_api.checks import CEL_OFFLINE, OBJECT_RULES, Document, Report, check_documents
from tests.support.invalid_manifests import INVALID, Case
from tests.support.operator import Manifest, agent, at, deployment, spec


def _check(*manifests: object) -> Report:
    return check_documents([Document(f"m.yaml:{i}", m) for i, m in enumerate(manifests, start=1)])


def _lines(report: Report) -> list[str]:
    return [str(p) for p in report.problems]


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_what_the_api_server_refuses_is_reported(case: Case) -> None:
    others = [deployment()] if case.manifest["kind"] == "PallasAgent" else []
    report = _check(*others, case.manifest)
    name = f"{case.manifest['kind']}/{case.manifest['metadata']['name']}"
    mine = [line for line in _lines(report) if line.startswith(f"m.yaml:{len(others) + 1}: {name}: ")]
    assert mine, _lines(report)
    assert any(all(text in line for text in case.reported_as) for line in mine), mine
    assert len(mine) == len(_lines(report)), "only the broken object is reported"


def test_every_cel_rule_has_an_offline_counterpart() -> None:
    mirrored = {rule["message"] for rules in OBJECT_RULES.values() for rule, _ in rules}
    for rules in [*crds.AGENT_RULES.values(), *crds.DEPLOYMENT_RULES.values(), *crds.TRIGGER_RULES.values()]:
        for rule in rules:
            message = rule["message"]
            held = message in mirrored or any(message.startswith(start) for start in CEL_OFFLINE)
            assert held, f"CEL rule without an offline check in pallas_api.checks: {message}"


def test_valid_objects_pass_and_other_kinds_are_skipped() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}
    report = _check(deployment(), service, agent("research"), agent("boss", spec(agents=["research"])), None)
    assert report.problems == []
    assert report.checked == 3
    assert report.skipped == ["m.yaml:2: Service/web"]


def test_references_are_checked_as_the_operator_does() -> None:
    report = _check(
        deployment(),
        agent("no-deployment", spec(deployment="elsewhere")),
        agent("no-peer", spec(agents=["ghost"])),
        agent("no-server", spec(servers=["nope"])),
        agent("no-provider", spec(model="anthropic.claude")),
        agent("closed", at("spec.access.subjects", ["alice"])),
        agent("ouranos-registry"),
    )
    assert _lines(report) == [
        "m.yaml:2: PallasAgent/no-deployment: spec.deployment: PallasDeployment 'elsewhere' not found in "
        "namespace 'default' of the files",
        "m.yaml:3: PallasAgent/no-peer: spec.agents/dependsOn: PallasAgents not found in namespace "
        "'default' of the files: ghost",
        "m.yaml:5: PallasAgent/no-provider: spec.model: model 'anthropic.claude' names provider "
        "'anthropic', which the deployment does not define",
        "m.yaml:6: PallasAgent/closed: spec.access: spec.access names allowed callers, but the deployment's "
        "spec.auth.mode is none, so no caller is identified: set spec.auth.mode to kubernetes or oidc, "
        "or remove spec.access",
        "m.yaml:7: PallasAgent/ouranos-registry: metadata.name: the name 'ouranos-registry' is taken by "
        "the registry of deployment 'ouranos'",
    ]
    # The gateway seed: an undefined server is a warning; the agent runs on the rest.
    assert [str(w) for w in report.warnings] == [
        "m.yaml:4: PallasAgent/no-server: spec.servers: mcpServers nope not defined by the deployment: "
        "the agent runs without them"
    ]


def test_a_cycle_is_reported_on_every_agent_in_it() -> None:
    report = _check(
        deployment(),
        agent("a", spec(agents=["b"])),
        agent("b", spec(dependsOn=["c"])),
        agent("c", spec(agents=["a"])),
        agent("d", spec(agents=["a"])),  # depends on the cycle, is not in it
    )
    assert _lines(report) == [
        "m.yaml:2: PallasAgent/a: spec.agents/dependsOn: agents and dependsOn form a cycle: a -> b -> c -> a",
        "m.yaml:3: PallasAgent/b: spec.agents/dependsOn: agents and dependsOn form a cycle: b -> c -> a -> b",
        "m.yaml:4: PallasAgent/c: spec.agents/dependsOn: agents and dependsOn form a cycle: c -> a -> b -> c",
    ]


def test_namespaces_keep_objects_apart() -> None:
    report = _check(deployment(), agent("a", at("metadata.namespace", "other")), agent("a"))
    assert [p.object for p in report.problems] == ["PallasAgent/a"]
    assert "namespace 'other'" in report.problems[0].message


def test_broken_documents_a_wrong_api_version_and_twins_are_reported() -> None:
    wrong_api = deployment("d2", at("apiVersion", "pallas.dev/v1"))
    no_name: Manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}
    report = _check(deployment(), ["a", "list"], wrong_api, no_name, deployment())
    assert _lines(report) == [
        "m.yaml:2: (document): (top level): must be a mapping",
        "m.yaml:3: PallasDeployment/d2: apiVersion: must be pallas.dev/v1alpha1 (got 'pallas.dev/v1')",
        "m.yaml:4: ConfigMap/None: kind, metadata.name: every object needs both",
        "m.yaml:5: PallasDeployment/ouranos: metadata.name: defined twice in namespace 'default' "
        "(first at m.yaml:1)",
    ]


def test_an_agent_of_a_broken_deployment_is_not_blamed_for_it() -> None:
    report = _check(deployment("ouranos", at("spec.providers.vllm.type", "cohere")), agent())
    assert [p.object for p in report.problems] == ["PallasDeployment/ouranos"]


def test_a_stateful_stdio_server_is_a_cluster_problem_but_not_pallas_runs() -> None:
    shell = {"stdio": {"command": "sh-mcp"}, "stateful": True}
    docs = [
        Document("m.yaml:1", deployment("ouranos", at("spec.mcpServers.shell", shell))),
        Document("m.yaml:20", agent("research", spec(servers=["shell"]))),
    ]
    (problem,) = check_documents(docs).problems
    assert (problem.field, problem.object) == ("spec.servers", "PallasAgent/research")
    assert "only `pallas run` hosts" in problem.message
    assert check_documents(docs, local=True).problems == []
