"""The start-up orphan sweep on the in-memory world and cluster: which bindings it deletes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from pallas_api import names
from pallas_operator.k8s.delegations import DelegationBinding
from pallas_operator.reconcile.orphans import sweep_orphans
from tests.support.fake_cluster import FakeCluster, in_memory_operator
from tests.support.operator import deployment


def binding(namespace: str, deployment_name: str, managed: bool = True) -> dict[str, Any]:
    """An auth-delegator ClusterRoleBinding labelled as the deployment's."""
    labels = {names.LABEL_NAMESPACE: namespace, names.LABEL_DEPLOYMENT: deployment_name}
    if managed:
        labels[names.LABEL_MANAGED_BY] = names.MANAGED_BY
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": names.auth_delegation_binding(namespace, deployment_name), "labels": labels},
    }


async def test_only_the_bindings_of_deployments_gone_everywhere_are_swept() -> None:
    cluster = FakeCluster()
    watched, unseen = deployment("watched"), deployment("unseen")  # unseen: created after the listing
    cluster.load(
        watched,
        unseen,
        binding("default", "watched"),
        binding("default", "unseen"),
        binding("default", "gone"),
        binding("default", "hand-made", managed=False),
        binding("elsewhere", "gone"),  # not a watched namespace
    )
    op = in_memory_operator(cluster)
    op.world.record(names.DEPLOYMENT_KIND, watched)

    swept = await sweep_orphans(op)

    assert swept == [names.auth_delegation_binding("default", "gone")]
    assert cluster.deleted == [("ClusterRoleBinding", "", swept[0])]


class _Refusing(FakeCluster):
    async def delegation_bindings(self, namespaces: Sequence[str]) -> list[DelegationBinding]:
        raise RuntimeError("forbidden")


async def test_a_failed_sweep_is_logged_and_start_up_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    assert await sweep_orphans(in_memory_operator(_Refusing())) == []
    assert "did not finish: forbidden" in caplog.text
