"""The fleet endpoint in `auth.mode: kubernetes` against the real API server of the local control plane.

The registry runs in this process with the credentials of a ServiceAccount bound to
`system:auth-delegator` (as the operator binds the registry's); callers are ServiceAccounts with
Roles granting verb `invoke` on named PallasAgents, their tokens minted by the TokenRequest API.
Each caller sees and may call exactly the agents RBAC lets it invoke.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from lightkube import KubeConfig

from pallas_api.spec import AuthSpec
from pallas_registry import MemorySource
from pallas_registry.fleet import FIXED_TOOLS
from tests.support.access import KubeAccess
from tests.support.cluster import LocalCluster
from tests.support.registry import running_registry, state

MCP_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


def fleet_of(base: str, token: str) -> Client[Any]:
    transport = StreamableHttpTransport(f"{base}/mcp", headers={"Authorization": f"Bearer {token}"})
    return Client(transport)


async def test_each_caller_sees_and_calls_only_the_agents_rbac_lets_it_invoke(
    kube_cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    world = KubeAccess(kube_cluster, namespace)
    try:
        world.service_account("registry", "alice", "bob")
        world.delegate("registry")
        world.allow("alice", "research")
        world.allow("bob", "research", "writer")
        kubernetes = AuthSpec(mode="kubernetes")
        source = MemorySource(
            [
                state("research", namespace=namespace, auth_spec=kubernetes),
                state("writer", namespace=namespace, auth_spec=kubernetes),
            ]
        )
        config = KubeConfig.from_file(world.kubeconfig("registry", tmp_path))
        alice, bob = world.token("alice"), world.token("bob")
        async with running_registry(source, start_source=False, kubernetes_config=config) as base:
            async with httpx2.AsyncClient() as http:
                bare = await http.post(f"{base}/mcp", json=PING, headers=MCP_ACCEPT)
                forged = {**MCP_ACCEPT, "Authorization": "Bearer not-a-token"}
                stranger = await http.post(f"{base}/mcp", json=PING, headers=forged)
            assert (bare.status_code, stranger.status_code) == (401, 401)
            for token, sees in ((alice, {"research"}), (bob, {"research", "writer"})):
                async with fleet_of(base, token) as client:
                    assert {t.name for t in await client.list_tools()} - FIXED_TOOLS == sees
                    listed = json.loads((await client.call_tool("list_agents", {})).content[0].text)
                    assert {a["name"] for a in listed} == sees
                    for hidden in {"research", "writer"} - sees:
                        refused = await client.call_tool(hidden, {"message": "hi"}, raise_on_error=False)
                        assert refused.is_error
                        assert f"you may not invoke agent {hidden}" in refused.content[0].text
    finally:
        world.cleanup()
