"""The lightkube adapter of the `Cluster` port: the requests it makes, on a client that records them.

What the API server does with them is the integration tier's; here: the resource class, the
namespace, server-side apply with the operator's field manager and force, and a 404 read as absent.
"""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import Status
from lightkube.resources.core_v1 import ConfigMap, Secret
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding
from lightkube.types import PatchType

from pallas_api import names
from pallas_operator.k8s.lightkube_cluster import LightkubeCluster
from pallas_operator.k8s.resources import PallasAgent, PallasDeployment

APPLY = {"patch_type": PatchType.APPLY, "field_manager": names.FIELD_MANAGER, "force": True}


class RecordingClient:
    """Records each call as (verb, resource, name, keyword arguments); answers with `answer`."""

    def __init__(self, answer: Any = None, error: int | None = None) -> None:
        self.calls: list[tuple[str, Any, str, dict[str, Any]]] = []
        self.answer = answer
        self.error = error

    def _call(self, verb: str, resource: Any, name: str, **kw: Any) -> Any:
        self.calls.append((verb, resource, name, kw))
        if self.error is not None:
            raise ApiError(status=Status(code=self.error, message="refused"))
        return self.answer

    async def patch(self, resource: Any, name: str, body: Any, **kw: Any) -> Any:
        return self._call("patch", resource, name, body=body, **kw)

    async def delete(self, resource: Any, name: str, **kw: Any) -> Any:
        return self._call("delete", resource, name, **kw)

    async def get(self, resource: Any, name: str, **kw: Any) -> Any:
        return self._call("get", resource, name, **kw)

    async def create(self, obj: Any, **kw: Any) -> Any:
        return self._call("create", type(obj), obj.metadata.name, body=obj, **kw)


def cluster(answer: Any = None, error: int | None = None) -> tuple[LightkubeCluster, RecordingClient]:
    client = RecordingClient(answer, error)
    return LightkubeCluster(client), client  # type: ignore[arg-type]


CONFIG_MAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "research-config", "namespace": "agents"},
}


async def test_a_child_is_server_side_applied_as_the_operator_forcing() -> None:
    adapter, client = cluster(ConfigMap.from_dict(CONFIG_MAP))

    assert await adapter.apply(CONFIG_MAP) == ConfigMap.from_dict(CONFIG_MAP).to_dict()

    assert client.calls == [
        ("patch", ConfigMap, "research-config", {"body": CONFIG_MAP, "namespace": "agents", **APPLY})
    ]


async def test_a_status_goes_to_the_status_subresource_and_its_version_comes_back() -> None:
    answer = PallasAgent.from_dict({"metadata": {"name": "research", "resourceVersion": "42"}})
    adapter, client = cluster(answer)

    assert await adapter.write_status(names.AGENT_KIND, "agents", "research", {"phase": "Ready"}) == "42"

    ((verb, resource, name, kw),) = client.calls
    assert (verb, resource, name, kw["namespace"]) == ("patch", PallasAgent.Status, "research", "agents")
    assert kw["body"]["status"] == {"phase": "Ready"}
    assert {k: kw[k] for k in APPLY} == APPLY


async def test_a_cluster_scoped_child_is_addressed_without_a_namespace() -> None:
    adapter, client = cluster(error=404)

    await adapter.delete("", "ClusterRoleBinding", "pallas:agents:ouranos:auth-delegator")  # gone is fine
    assert await adapter.get("ClusterRoleBinding", "", "pallas:agents:ouranos:auth-delegator") is None
    assert await adapter.get(names.DEPLOYMENT_KIND, "agents", "ouranos") is None

    assert [(verb, resource, kw["namespace"]) for verb, resource, _, kw in client.calls] == [
        ("delete", ClusterRoleBinding, None),
        ("get", ClusterRoleBinding, None),
        ("get", PallasDeployment, "agents"),
    ]


async def test_other_refusals_are_raised() -> None:
    adapter, _ = cluster(error=403)

    with pytest.raises(ApiError):
        await adapter.delete("agents", "ConfigMap", "research-config")
    with pytest.raises(ApiError):
        await adapter.get("ConfigMap", "agents", "research-config")


SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "ouranos-bridge-token", "namespace": "agents"},
    "stringData": {"token": "t"},
}


async def test_a_secret_is_created_once_and_one_that_exists_is_kept() -> None:
    made, client = cluster()
    assert await made.create_secret(SECRET) is True
    ((verb, resource, name, kw),) = client.calls
    assert (verb, resource, name) == ("create", Secret, "ouranos-bridge-token")
    assert kw["body"].metadata.namespace == "agents"
    assert kw["body"].stringData == {"token": "t"}
    there, _ = cluster(error=409)
    assert await there.create_secret(SECRET) is False  # never read, never replaced
    refused, _ = cluster(error=403)
    with pytest.raises(ApiError):
        await refused.create_secret(SECRET)


async def test_finalizers_are_a_merge_patch_on_the_version_seen_and_a_conflict_is_false() -> None:
    adapter, client = cluster()
    written = await adapter.set_finalizers(
        names.AGENT_KIND, "agents", "research", [names.CONVERSATIONS_FINALIZER], "41"
    )
    assert written is True
    ((verb, resource, name, kw),) = client.calls
    assert (verb, resource, name, kw["namespace"]) == ("patch", PallasAgent, "research", "agents")
    assert kw["patch_type"] == PatchType.MERGE
    # The resourceVersion makes it conditional: another controller's finalizer is never lost.
    assert kw["body"] == {
        "metadata": {"finalizers": [names.CONVERSATIONS_FINALIZER], "resourceVersion": "41"}
    }

    stale, _ = cluster(error=409)
    assert await stale.set_finalizers(names.AGENT_KIND, "agents", "research", [], "40") is False
    gone, _ = cluster(error=404)
    assert await gone.set_finalizers(names.AGENT_KIND, "agents", "research", [], "40") is True
    refused, _ = cluster(error=403)
    with pytest.raises(ApiError):
        await refused.set_finalizers(names.AGENT_KIND, "agents", "research", [], "40")
