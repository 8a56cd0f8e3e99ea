"""The generated CRDs on the real API server: bad manifests are refused with a message that says
what to fix; good ones are accepted and defaulted; `kubectl explain` reads the descriptions.

The invalid cases are shared with `pallas validate`'s tests (tests/support/invalid_manifests.py).
Creation cases use server-side dry run: the API server runs every check (schema, CEL, strict
field validation) without storing anything, so the cases stay independent and fast.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.support.cluster import LocalCluster
from tests.support.invalid_manifests import INVALID, Case
from tests.support.operator import Manifest, agent, deployment, in_namespace, spec


def _create(cluster: LocalCluster, manifest: Manifest) -> Any:
    return cluster.kubectl(
        "create", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-",
        stdin=json.dumps(manifest), check=False,
    )  # fmt: skip


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_invalid_manifest_is_refused_saying_what_to_fix(
    pallas_crds: LocalCluster, namespace: str, case: Case
) -> None:
    """The same cases `pallas validate` must report (tests/integration/runtime/test_validate_command.py)."""
    manifest = copy.deepcopy(case.manifest)
    in_namespace(namespace)(manifest)
    result = _create(pallas_crds, manifest)
    assert result.returncode != 0, f"accepted: {result.stdout[:300]}"
    for text in case.refused_with:
        assert text in result.stderr, result.stderr


def test_valid_manifests_are_accepted_and_defaulted(pallas_crds: LocalCluster, namespace: str) -> None:
    relative_icon = spec(icons=[{"src": "/icons/research.svg", "sizes": ["any"]}])
    for manifest in (deployment("ouranos"), agent("research", relative_icon)):
        in_namespace(namespace)(manifest)
        result = _create(pallas_crds, manifest)
        assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert created["spec"]["service"] == {"port": 8000, "sessionAffinity": "ClientIP"}
    # No default written: an agent of fixed size has 1 pod unless it says otherwise, and one that
    # follows the deployment's `scaling` must not carry a `replicas` it never set.
    assert "replicas" not in created["spec"]
    # maxMessages: the deployment's
    assert created["spec"]["history"] == {"maxConversations": 1000, "maxBytes": 64 * 1024 * 1024}
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
    assert "Pods serving this agent, a fixed number" in out
    out = pallas_crds.kubectl("explain", "pd.spec.registry").stdout
    assert "Service port of the registry." in out


def test_short_names_category_and_printer_columns(pallas_crds: LocalCluster, namespace: str) -> None:
    pallas_crds.kubectl("create", "-f", "-", stdin=json.dumps(agent("a1", in_namespace(namespace))))
    wide = pallas_crds.kubectl("get", "pa", "-n", namespace, "-o", "wide").stdout.splitlines()[0].split()
    assert wide == ["NAME", "DEPLOYMENT", "PHASE", "READY", "HEALTH", "MODEL", "AGE", "URL", "WORKFLOW"]
    listed = pallas_crds.kubectl("get", "pallas", "-n", namespace, "-o", "name").stdout
    assert "pallasagent.pallas.dev/a1" in listed
    pallas_crds.kubectl("create", "-f", "-", stdin=json.dumps(deployment("d1", in_namespace(namespace))))
    header = pallas_crds.kubectl("get", "pd", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "AGENTS", "READY", "REGISTRY", "AGE"]
