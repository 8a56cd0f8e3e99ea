"""The chart's in-use protection on the real API server: what agents use is not taken from them.

The ValidatingAdmissionPolicy of `templates/in-use-protection.yaml` reads the status the operator
keeps (`status.agents.total`, `status.inUse`); here the test writes that status itself, so no
operator runs. The policy is bound to the test's namespace only (`watchNamespaces`), as a release
binds it to the namespaces its operator watches, and removed at the end: the other tests of the
cluster delete deployments with agents freely. Every change is tried with `--dry-run=server`
first, which runs admission, until the new policy is in force.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.integration.chart.test_chart_template import CHART, KUBE_VERSION, helm, helm_home
from tests.support.cluster import LocalCluster
from tests.support.operator import at, deployment, in_namespace, kubectl_apply

__all__ = ["helm", "helm_home"]  # fixtures

SPARE_PROVIDER = {
    "type": "openai",
    "baseURL": "http://spare.llm.svc:8000/v1",
    "apiKey": {"secretKeyRef": {"name": "llm", "key": "SPARE"}},
}
IN_FORCE_WITHIN = 30.0


@pytest.fixture
def policy(pallas_crds: LocalCluster, namespace: str, helm: str, helm_home: dict[str, str]) -> Iterator[str]:
    """The chart's policy and binding, bound to `namespace`; deleted afterwards."""
    release = f"inuse-{secrets.token_hex(3)}"
    rendered = subprocess.run(
        [helm, "template", release, str(CHART), "--kube-version", KUBE_VERSION,
         "--show-only", "templates/in-use-protection.yaml", "--set", f"watchNamespaces[0]={namespace}"],
        capture_output=True, text=True, env=helm_home, timeout=60, check=True,
    ).stdout  # fmt: skip
    pallas_crds.kubectl("apply", "-f", "-", stdin=rendered)
    try:
        yield f"{release}-pallas-in-use"
    finally:
        pallas_crds.kubectl("delete", "-f", "-", "--ignore-not-found", stdin=rendered)


def _refusal(cluster: LocalCluster, *args: str, stdin: str | None = None) -> str:
    """The API server's answer to `kubectl <args> --dry-run=server`: '' when it would allow it."""
    res = cluster.kubectl(*args, "--dry-run=server", stdin=stdin, check=False)
    return "" if res.returncode == 0 else res.stderr


def _refused(cluster: LocalCluster, *args: str, stdin: str | None = None) -> str:
    """The refusal of a change once the policy is in force (it takes the API server a moment)."""
    deadline = time.monotonic() + IN_FORCE_WITHIN
    while not (message := _refusal(cluster, *args, stdin=stdin)):
        assert time.monotonic() < deadline, f"kubectl {' '.join(args)} was never refused"
        time.sleep(0.3)
    return message


def _used(cluster: LocalCluster, namespace: str, name: str, agents: int, **in_use: list[str]) -> None:
    """Write the status the operator would: `agents` agents using `in_use`."""
    status = {"status": {"agents": {"total": agents}, "inUse": in_use}}
    cluster.kubectl(
        "patch", "pallasdeployment", name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip


def _refused_deletion(cluster: LocalCluster, namespace: str, agents: int) -> str:
    """Deployment `ouranos` used by `agents` agents, and the refusal of its deletion."""
    kubectl_apply(cluster, deployment("ouranos", in_namespace(namespace)))
    _used(cluster, namespace, "ouranos", agents, providers=["vllm"], mcpServers=["argos"])
    return _refused(cluster, "delete", "pallasdeployment", "ouranos", "-n", namespace)


def test_a_deployment_in_use_is_not_deleted_unless_forced(
    pallas_crds: LocalCluster, namespace: str, policy: str
) -> None:
    message = _refused_deletion(pallas_crds, namespace, agents=2)
    assert policy in message
    assert "PallasDeployment ouranos is used by 2 PallasAgents" in message
    assert "pallas.dev/force=true" in message

    pallas_crds.kubectl("annotate", "pallasdeployment", "ouranos", "-n", namespace, "pallas.dev/force=true")
    pallas_crds.kubectl("delete", "pallasdeployment", "ouranos", "-n", namespace, "--wait=false")


def test_a_deployment_without_agents_is_deleted(
    pallas_crds: LocalCluster, namespace: str, policy: str
) -> None:
    ns = in_namespace(namespace)
    kubectl_apply(pallas_crds, deployment("ouranos", ns), deployment("busy", ns))
    _used(pallas_crds, namespace, "busy", 1, providers=["vllm"], mcpServers=[])
    _refused(pallas_crds, "delete", "pallasdeployment", "busy", "-n", namespace)  # the policy is in force

    _used(pallas_crds, namespace, "ouranos", 0, providers=[], mcpServers=[])
    assert _refusal(pallas_crds, "delete", "pallasdeployment", "ouranos", "-n", namespace) == ""


def test_what_agents_use_stays_in_the_spec_and_the_rest_may_go(
    pallas_crds: LocalCluster, namespace: str, policy: str
) -> None:
    ns = in_namespace(namespace)
    spare_server = at("spec.mcpServers.spare", {"url": "http://spare.tools.svc:8000/mcp"})
    full = deployment("ouranos", ns, at("spec.providers.spare", SPARE_PROVIDER), spare_server)
    kubectl_apply(pallas_crds, full)
    _used(pallas_crds, namespace, "ouranos", 1, providers=["vllm"], mcpServers=["argos"])

    no_argos = deployment("ouranos", ns, at("spec.providers.spare", SPARE_PROVIDER), spare_server)
    del no_argos["spec"]["mcpServers"]["argos"]
    message = _refused(pallas_crds, "apply", "-f", "-", stdin=json.dumps(no_argos))
    assert "spec.mcpServers: argos used by agents of this deployment" in message

    no_vllm = deployment("ouranos", ns, at("spec.providers.spare", SPARE_PROVIDER), spare_server)
    del no_vllm["spec"]["providers"]["vllm"]
    no_vllm["spec"]["model"]["default"] = "spare.small"
    assert "spec.providers: vllm used by agents" in _refusal(
        pallas_crds, "apply", "-f", "-", stdin=json.dumps(no_vllm)
    )

    # What no agent uses may go, and a forced edit may take the rest.
    unused_gone = deployment("ouranos", ns)
    kubectl_apply(pallas_crds, unused_gone)
    forced = deployment("ouranos", ns, at("metadata.annotations", {"pallas.dev/force": "true"}))
    forced["spec"]["mcpServers"] = {}
    kubectl_apply(pallas_crds, forced)


def test_a_namespace_being_deleted_takes_its_deployments_in_use(
    pallas_crds: LocalCluster, namespace: str, policy: str
) -> None:
    _refused_deletion(pallas_crds, namespace, agents=3)

    pallas_crds.kubectl("delete", "namespace", namespace, "--wait=false")

    deadline = time.monotonic() + 90
    while pallas_crds.kubectl("get", "namespace", namespace, check=False).returncode == 0:
        phase = pallas_crds.kubectl("get", "namespace", namespace, "-o", "json", check=False).stdout
        assert time.monotonic() < deadline, f"the namespace is never deleted: {phase}"
        time.sleep(0.5)
