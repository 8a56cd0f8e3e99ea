"""The operator runs with exactly the permissions api/rbac.py lists (what docs/operator.md says)."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding, Role

from pallas_api import names
from pallas_io.kube import PallasAgent
from pallas_operator.builders import Owner, auth_delegation_binding
from pallas_operator.operator_rbac import CLUSTER_RULES, LEASE_RULES
from pallas_operator.runner import Runner
from tests.support.cluster import LocalCluster
from tests.support.operator import (
    agent,
    condition,
    deployment,
    eventually,
    get_object,
    in_namespace,
    kubectl_apply,
    operator_settings,
    secret,
    spec,
)

AGENT_PODS = {"pallas.dev/agent": "research"}


def _service_account_kubeconfig(cluster: LocalCluster, namespace: str, path: Path) -> Path:
    token = cluster.kubectl(
        "create", "token", "pallas-operator", "-n", namespace, "--duration=1h"
    ).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    cluster_entry = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster_entry],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": cluster_entry["name"], "user": "operator"}}],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def test_the_operator_works_with_the_documented_least_privilege_rbac(
    pallas_crds: LocalCluster,
    kube_client: AsyncClient,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    role = f"pallas-operator-{secrets.token_hex(3)}"
    subjects = [{"kind": "ServiceAccount", "name": "pallas-operator", "namespace": namespace}]
    rbac = "rbac.authorization.k8s.io"
    lease = {"name": "pallas-operator-lease", "namespace": namespace}
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**lease, "name": "pallas-operator"}},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": {"name": role},
         "rules": CLUSTER_RULES},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": role}, "subjects": subjects},
        {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": lease, "rules": LEASE_RULES},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": lease,
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": lease["name"]}, "subjects": subjects},
    ]  # fmt: skip
    # A binding left by a deployment deleted while no operator ran: the start-up sweep lists it.
    orphan = auth_delegation_binding(Owner(names.DEPLOYMENT_KIND, "gone", namespace, "uid-gone"))
    manifests.append(orphan)
    pallas_crds.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in manifests))
    try:
        kubeconfig = _service_account_kubeconfig(pallas_crds, namespace, tmp_path / "kubeconfig")
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        runner = Runner(operator_settings(namespace), KubeConfig.from_file(kubeconfig))
        task = asyncio.create_task(runner.run())
        try:
            mod = in_namespace(namespace)
            kubectl_apply(
                pallas_crds, secret("llm", None, mod), deployment("ouranos", mod), agent("research", mod)
            )

            async def reconciled() -> Any:
                obj = await get_object(kube_client, PallasAgent, namespace, "research")
                return obj if condition(obj, "Accepted") == ("True", "Accepted") else None

            await eventually(reconciled, 30, "the agent reconciled under least privilege")
            assert await get_object(kube_client, Deployment, namespace, "research") is not None

            async def registry_role() -> Any:  # the deployment's reconcile, beside the agent's
                return await get_object(kube_client, Role, namespace, "ouranos-registry")

            await eventually(registry_role, 30, "the registry's Role applied under least privilege")
            swept = await get_object(kube_client, ClusterRoleBinding, "", orphan["metadata"]["name"])
            assert swept is None, "the orphan sweep ran under least privilege"
            assert task.done() is False

            # A live edit reaches the agent's pods (the config-sync annotation) under these rules:
            # the pods the ReplicaSet made before the edit (a pod made after it needs no nudge).
            async def pods_made() -> Any:
                return [p async for p in kube_client.list(Pod, namespace=namespace, labels=AGENT_PODS)]

            await eventually(pods_made, 60, "the agent's pod created")
            kubectl_apply(pallas_crds, agent("research", mod, spec(instruction="Be brief.")))

            async def nudged() -> Any:
                pods = [p async for p in kube_client.list(Pod, namespace=namespace, labels=AGENT_PODS)]
                marked = [p for p in pods if "pallas.dev/config-sync" in (p.metadata.annotations or {})]
                return marked if pods and len(marked) == len(pods) else None

            await eventually(nudged, 30, "the agent's pods annotated after a live edit")
            # It did all that holding no right on Secrets, not even to list their names: RBAC
            # has no metadata-only verb, so list/watch would read every value.
            who = f"--as=system:serviceaccount:{namespace}:pallas-operator"
            for verb in ("get", "list", "watch"):
                can = pallas_crds.kubectl("auth", "can-i", who, verb, "secrets", "-A", check=False)
                assert can.stdout.strip() == "no", verb
        finally:
            runner.stop.set()
            assert await asyncio.wait_for(task, 30) == 0
    finally:
        pallas_crds.kubectl("delete", "clusterrole,clusterrolebinding", role, "--ignore-not-found")
        pallas_crds.kubectl("delete", "clusterrolebinding", orphan["metadata"]["name"], "--ignore-not-found")
