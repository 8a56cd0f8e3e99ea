"""The generated CRDs on the real API server: bad manifests are refused with a message that says
what to fix; good ones are accepted and defaulted; `kubectl explain` reads the descriptions.

Creation cases use server-side dry run: the API server runs every check (schema, CEL, strict
field validation) without storing anything, so the cases stay independent and fast.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.cluster import LocalCluster
from tests.support.operator import Manifest, agent, at, deployment, in_namespace, spec, without

LONG_NAME = "d" + "x" * 55


def _create(cluster: LocalCluster, manifest: Manifest) -> Any:
    return cluster.kubectl(
        "create", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-",
        stdin=json.dumps(manifest), check=False,
    )  # fmt: skip


INVALID = [
    ("negative-replicas", agent("a1", spec(replicas=-1)), ["spec.replicas", "greater than or equal to 0"]),
    ("replicas-wrong-type", agent("a1", spec(replicas="two")), ["spec.replicas", "must be of type integer"]),
    ("name-starts-with-digit", agent("1research"), ["metadata.name must be", "starting with a letter"]),
    ("name-with-dot", agent("re.search"), ["metadata.name must be", "names the agent's Service"]),
    ("model-without-provider", agent("a1", spec(model="gpt4")), ["spec.model must be '<provider>.<model>'"]),
    ("model-with-space", agent("a1", spec(model="vllm.qwen 3")), ["spec.model must be '<provider>.<model>'"]),
    ("description-over-100", agent("a1", spec(description="x" * 101)), ["spec.description", "100"]),
    ("unknown-spec-field", agent("a1", spec(modle="vllm.x")), ['unknown field "spec.modle"']),
    ("unknown-nested-field", agent("a1", at("spec.service.portt", 1)),
     ['unknown field "spec.service.portt"']),
    ("self-in-agents", agent("a1", spec(agents=["a1"])), ["spec.agents must not name the agent itself"]),
    ("self-in-depends-on", agent("a1", spec(dependsOn=["a1"])), ["spec.dependsOn must not name the agent"]),
    ("duplicate-servers", agent("a1", spec(servers=["argos", "argos"])),
     ["spec.servers[1]", "Duplicate value"]),
    ("duplicate-agents", agent("a1", spec(agents=["b", "b"])), ["spec.agents[1]", "Duplicate value"]),
    ("missing-deployment", agent("a1", without("spec.deployment")), ["spec.deployment", "Required value"]),
    ("bad-session-affinity", agent("a1", at("spec.service.sessionAffinity", "Sticky")),
     ['Unsupported value: "Sticky"', '"ClientIP", "None"']),
    ("port-out-of-range", agent("a1", at("spec.service.port", 70000)), ["spec.service.port", "65535"]),
    ("temperature-too-high", agent("a1", at("spec.requestParams.temperature", 3)),
     ["spec.requestParams.temperature", "less than or equal to 2"]),
    ("bad-capability-tag", agent("a1", spec(capabilities=["Web Search"])),
     ["spec.capabilities[0]", "should match"]),
    ("bad-dependency-name", agent("a1", spec(dependsOn=["Not_A_Name"])),
     ["spec.dependsOn[0]", "should match"]),
    ("deployment-name-too-long", deployment(LONG_NAME), ["metadata.name must be at most 54", "-registry"]),
    ("default-model-unknown-provider", deployment("d1", at("spec.model.default", "openai.gpt-4o")),
     ["spec.model.default must start with a key of spec.providers"]),
    ("postgres-without-dsn", deployment("d1", at("spec.conversations", {"store": "postgres"})),
     ["spec.conversations.postgres", "needs spec.conversations.postgres.dsn"]),
    ("unknown-store", deployment("d1", at("spec.conversations", {"store": "redis"})),
     ["spec.conversations.store", 'Unsupported value: "redis"']),
    ("provider-bad-type", deployment("d1", at("spec.providers.vllm.type", "gemini")),
     ["spec.providers.vllm.type", 'Unsupported value: "gemini"']),
    ("provider-bad-key", deployment("d1", at("spec.providers.My_Provider", {"type": "openai"})),
     ["spec.providers keys must be DNS labels"]),
    ("header-value-and-secret", deployment("d1", at("spec.mcpServers.argos.headers", [
        {"name": "X-Key", "value": "v", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])),
     ["a header needs exactly one of value or valueFrom"]),
    ("server-url-not-http", deployment("d1", at("spec.mcpServers.argos.url", "ftp://argos")),
     ["spec.mcpServers.argos.url", "should match"]),
    ("health-interval-too-short", deployment("d1", at("spec.healthCheck.intervalSeconds", 1)),
     ["spec.healthCheck.intervalSeconds", "greater than or equal to 5"]),
    ("missing-providers", deployment("d1", without("spec.providers")), ["spec.providers", "Required value"]),
    ("inline-api-key", deployment("d1", at("spec.providers.vllm.apiKey", "sk-live")),
     ["spec.providers.vllm.apiKey", "must be of type object"]),
    ("oidc-mode-without-settings", deployment("d1", at("spec.auth", {"mode": "oidc"})),
     ["spec.auth.mode oidc needs spec.auth.oidc with at least issuer and audience"]),
    ("oidc-settings-without-the-mode", deployment("d1", at("spec.auth", {
        "mode": "kubernetes", "oidc": {"issuer": "https://id.example", "audience": "a"}})),
     ["spec.auth.oidc is only used with spec.auth.mode oidc"]),
    ("unknown-auth-mode", deployment("d1", at("spec.auth.mode", "basic")),
     ['Unsupported value: "basic"', '"none", "kubernetes", "oidc"']),
    ("oidc-alg-none", deployment("d1", at("spec.auth", {"mode": "oidc", "oidc": {
        "issuer": "https://id.example", "audience": "a", "algorithms": ["none"]}})),
     ["spec.auth.oidc.algorithms[0]", 'Unsupported value: "none"']),
    ("oidc-hmac", deployment("d1", at("spec.auth", {"mode": "oidc", "oidc": {
        "issuer": "https://id.example", "audience": "a", "algorithms": ["HS256"]}})),
     ['Unsupported value: "HS256"']),
    ("oidc-issuer-not-a-url", deployment("d1", at("spec.auth", {"mode": "oidc", "oidc": {
        "issuer": "id.example", "audience": "a"}})),
     ["spec.auth.oidc.issuer", "should match"]),
    ("decision-cache-too-long", deployment("d1", at("spec.auth.kubernetes.cacheSeconds", 3600)),
     ["spec.auth.kubernetes.cacheSeconds", "less than or equal to 300"]),
    ("allow-from-empty-entry", deployment("d1", at("spec.network", {"policy": True, "allowFrom": [{}]})),
     ["an allowFrom entry needs namespaceSelector, podSelector or both"]),
    ("access-duplicate-subject", agent("a1", at("spec.access.subjects", ["alice", "alice"])),
     ["spec.access.subjects[1]", "Duplicate value"]),
]  # fmt: skip


@pytest.mark.parametrize(("manifest", "expected"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_manifest_is_refused_saying_what_to_fix(
    pallas_crds: LocalCluster, namespace: str, manifest: Manifest, expected: list[str]
) -> None:
    in_namespace(namespace)(manifest)
    result = _create(pallas_crds, manifest)
    assert result.returncode != 0, f"accepted: {result.stdout[:300]}"
    for text in expected:
        assert text in result.stderr, result.stderr


def test_valid_manifests_are_accepted_and_defaulted(pallas_crds: LocalCluster, namespace: str) -> None:
    for manifest in (deployment("ouranos"), agent("research")):
        in_namespace(namespace)(manifest)
        result = _create(pallas_crds, manifest)
        assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert created["spec"]["service"] == {"port": 8000, "sessionAffinity": "ClientIP"}
    assert created["spec"]["replicas"] == 1
    assert created["spec"]["history"] == {"maxConversations": 1000}  # maxMessages: the deployment's
    assert "servers" in created["spec"]
    assert "agents" not in created["spec"]


def test_deployment_of_an_agent_cannot_change(pallas_crds: LocalCluster, namespace: str) -> None:
    manifest = agent("a1", in_namespace(namespace))
    pallas_crds.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    spec(deployment="elsewhere")(manifest)
    result = pallas_crds.kubectl("apply", "-f", "-", stdin=json.dumps(manifest), check=False)
    assert result.returncode != 0
    assert "spec.deployment is immutable" in result.stderr, result.stderr


def test_kubectl_explain_shows_the_field_descriptions(pallas_crds: LocalCluster) -> None:
    out = pallas_crds.kubectl("explain", "pallasagents.spec").stdout
    assert "The PallasDeployment in the same namespace this agent belongs to" in out
    assert "Pods serving this agent." in out
    out = pallas_crds.kubectl("explain", "pd.spec.registry").stdout
    assert "Service port of the registry." in out


def test_short_names_category_and_printer_columns(pallas_crds: LocalCluster, namespace: str) -> None:
    pallas_crds.kubectl("create", "-f", "-", stdin=json.dumps(agent("a1", in_namespace(namespace))))
    wide = pallas_crds.kubectl("get", "pa", "-n", namespace, "-o", "wide").stdout.splitlines()[0].split()
    assert wide == ["NAME", "DEPLOYMENT", "PHASE", "READY", "HEALTH", "MODEL", "AGE", "URL"]
    listed = pallas_crds.kubectl("get", "pallas", "-n", namespace, "-o", "name").stdout
    assert "pallasagent.pallas.dev/a1" in listed
    pallas_crds.kubectl("create", "-f", "-", stdin=json.dumps(deployment("d1", in_namespace(namespace))))
    header = pallas_crds.kubectl("get", "pd", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "AGENTS", "READY", "REGISTRY", "AGE"]
