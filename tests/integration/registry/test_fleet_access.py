"""The fleet endpoint's access control under `pallas run`: the agents' own rules, checked at `/mcp`.

The deployment authenticates with OIDC (a real local issuer); the worker admits only the
`research` group, the boss every authenticated caller. alice (research) sees and reaches both,
eve (sales) only the boss: the worker is not in her `tools/list` nor `list_agents`, and calling
its tool anyway is refused before the worker is asked. Without a bearer (or with a forged one)
the endpoint answers 401, as the agents do.

In `kubernetes` mode the registry asks the API server (here a stand-in answering the two reviews)
a TokenReview per bearer and a SubjectAccessReview per caller and agent, after `spec.access`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError
from lightkube import KubeConfig
from lightkube.config.models import Cluster, User
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pallas_api.spec import AccessSpec, AuthSpec
from pallas_registry import MemorySource
from pallas_registry.fleet import FIXED_TOOLS
from tests.integration.registry.test_fleet import MODES, fleet_manifests, manifest_file, ready_agents
from tests.integration.runtime.test_run_command import pallas_run, registry_up
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.mcp_peers import free_ports
from tests.support.mcp_servers import serve_app
from tests.support.oidc import AUDIENCE, oidc_issuer
from tests.support.registry import running_registry, state

MCP_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
QUIET = {"PALLAS_LOG_LEVEL": "INFO", "PALLAS_ROOT_LOG_LEVEL": "WARNING"}
"""Nothing reads `pallas run`'s pipes until the end: debug lines of the polling registry would fill them."""


def fleet(base: int, token: str, mode: dict[str, Any]) -> Client[Any]:
    transport = StreamableHttpTransport(
        f"http://127.0.0.1:{base}/mcp", headers={"Authorization": f"Bearer {token}"}
    )
    return Client(transport, **mode)


@pytest.mark.parametrize("mode", MODES)
async def test_the_fleet_shows_and_relays_only_the_agents_a_caller_may_invoke(
    fake_openai: FakeOpenAI, tmp_path: Path, mode: dict[str, Any]
) -> None:
    fake_openai.default = lambda request: Text(f"{request['messages'][0]['content']} here")
    async with oidc_issuer() as issuer:
        docs = fleet_manifests(fake_openai)
        docs[1]["spec"]["auth"] = {"mode": "oidc", "oidc": {"issuer": issuer.url, "audience": AUDIENCE}}
        docs[3]["spec"]["access"] = {"groups": ["research"]}  # the worker: researchers only
        base = free_ports(3)
        alice, eve = issuer.token(sub="alice"), issuer.token(sub="eve", groups=["sales"])
        async with pallas_run(
            manifest_file(tmp_path, docs), base, env={"PALLAS_TOKEN": alice, **QUIET}
        ) as proc:
            await registry_up(base)
            await _door(base, alice, issuer.unsigned_token())

            async with fleet(base, alice, mode) as client:
                assert [a["name"] for a in await ready_agents(client, 2)] == ["boss", "worker"]
                assert {"boss", "worker"} <= {t.name for t in await client.list_tools()}
                answer = await client.call_tool("worker", {"message": "hello"})
                assert answer.content[0].text == "worker here"  # alice's bearer reached the worker

            asked = len(fake_openai.completions)
            async with fleet(base, eve, mode) as client:
                assert [a["name"] for a in await ready_agents(client, 1)] == ["boss"]
                tools = {t.name for t in await client.list_tools()}
                assert tools == {"list_agents", "get_agent_health", "registry_health", "boss"}
                with pytest.raises(ToolError, match="no agent 'worker'"):
                    await client.call_tool("get_agent_health", {"agent": "worker"})
                refused = await client.call_tool("worker", {"message": "hello"}, raise_on_error=False)
                assert refused.is_error
                assert "you may not invoke agent worker" in refused.content[0].text
                assert refused.structured_content["error"]["code"] == "DENIED_BY_POLICY"
                assert len(fake_openai.completions) == asked  # the worker was never asked
                answer = await client.call_tool("boss", {"message": "hello"})
                assert answer.content[0].text == "boss here"
                health = json.loads(
                    (await client.call_tool("get_agent_health", {"agent": "boss"})).content[0].text
                )
                assert health["name"] == "boss"
            proc.terminate()
            _, err = proc.communicate(timeout=15)
    assert alice not in err
    assert eve not in err


async def _door(base: int, alice: str, forged: str) -> None:
    """Without a bearer, with a forged one, or with two: refused before any MCP is spoken."""
    url = f"http://127.0.0.1:{base}/mcp"
    async with httpx2.AsyncClient() as http:
        bare = await http.post(url, json=PING, headers=MCP_ACCEPT)
        assert bare.status_code == 401
        assert bare.headers["www-authenticate"].startswith("Bearer ")
        assert bare.json()["error"] == "unauthorized"
        bad = await http.post(url, json=PING, headers={**MCP_ACCEPT, "Authorization": f"Bearer {forged}"})
        assert bad.status_code == 401
        assert 'error="invalid_token"' in bad.headers["www-authenticate"]
        two = await http.post(
            url,
            json=PING,
            headers=[
                *MCP_ACCEPT.items(),
                ("Authorization", f"Bearer {alice}"),
                ("Authorization", "Bearer x"),
            ],
        )
        assert two.status_code == 400


class ReviewingApiServer:
    """The two endpoints of a Kubernetes API server the reviews use, answering from tables.

    `users`: bearer → user name; `rbac`: (user, agent) pairs that may `invoke`. Every
    SubjectAccessReview is kept, so a test sees what was asked.
    """

    def __init__(self, users: dict[str, str], rbac: set[tuple[str, str]]) -> None:
        self.users = users
        self.rbac = rbac
        self.access_reviews: list[dict[str, Any]] = []

    def app(self) -> Starlette:
        async def token_review(request: Request) -> Response:
            body = await request.json()
            user = self.users.get(body["spec"]["token"])
            status: dict[str, Any] = {"authenticated": user is not None}
            if user is not None:
                status["user"] = {"username": user, "groups": ["system:authenticated"], "uid": f"uid-{user}"}
            return JSONResponse({**body, "status": status}, 201)

        async def access_review(request: Request) -> Response:
            body = await request.json()
            self.access_reviews.append(body["spec"])
            spec = body["spec"]
            allowed = (spec["user"], spec["resourceAttributes"]["name"]) in self.rbac
            return JSONResponse({**body, "status": {"allowed": allowed}}, 201)

        return Starlette(
            routes=[
                Route("/apis/authentication.k8s.io/v1/tokenreviews", token_review, methods=["POST"]),
                Route("/apis/authorization.k8s.io/v1/subjectaccessreviews", access_review, methods=["POST"]),
            ]
        )


async def test_kubernetes_mode_the_fleet_asks_rbac_about_each_agent_for_each_caller() -> None:
    alice, bob = "system:serviceaccount:agents:alice", "system:serviceaccount:agents:bob"
    api = ReviewingApiServer(
        {"alice-token": alice, "bob-token": bob},
        {(alice, "research"), (bob, "research"), (bob, "notes"), (bob, "writer")},
    )
    kubernetes = AuthSpec(mode="kubernetes")
    source = MemorySource(
        [
            state("research", auth_spec=kubernetes),
            state("notes", auth_spec=kubernetes),
            # RBAC lets bob invoke the writer, but its spec.access names only carol.
            state("writer", auth_spec=kubernetes, access=AccessSpec(subjects=["carol"])),
        ]
    )
    async with serve_app(api.app(), path="") as server:
        config = KubeConfig.from_one(cluster=Cluster(server=server.url), user=User(token="registry-token"))
        async with running_registry(source, start_source=False, kubernetes_config=config) as base:
            async with httpx2.AsyncClient() as http:
                bare = await http.post(f"{base}/mcp", json=PING, headers=MCP_ACCEPT)
                assert bare.status_code == 401
                stranger = {**MCP_ACCEPT, "Authorization": "Bearer nobody-token"}
                assert (await http.post(f"{base}/mcp", json=PING, headers=stranger)).status_code == 401
            for token, sees in (("alice-token", {"research"}), ("bob-token", {"research", "notes"})):
                async with fleet_of(base, token) as client:
                    tools = {t.name for t in await client.list_tools()} - FIXED_TOOLS
                    assert tools == sees, token
                    listed = json.loads((await client.call_tool("list_agents", {})).content[0].text)
                    assert {a["name"] for a in listed} == sees
                    for hidden in {"research", "notes", "writer"} - sees:
                        refused = await client.call_tool(hidden, {"message": "hi"}, raise_on_error=False)
                        assert refused.is_error
                        assert f"you may not invoke agent {hidden}" in refused.content[0].text
    asked = {(r["user"], r["resourceAttributes"]["name"]) for r in api.access_reviews}
    # Nobody is reviewed for the writer: its spec.access refuses them first.
    assert asked == {(alice, "research"), (alice, "notes"), (bob, "research"), (bob, "notes")}
    review = next(r for r in api.access_reviews if r["user"] == alice)
    assert review["resourceAttributes"] | {"name": "research"} == {
        "group": "pallas.dev",
        "resource": "pallasagents",
        "verb": "invoke",
        "name": "research",
        "namespace": "agents",
    }
    assert review["uid"] == f"uid-{alice}"
    # Decisions are kept (cacheSeconds): one review per caller and agent, however often asked.
    assert len(api.access_reviews) == len(asked)


def fleet_of(base: str, token: str) -> Client[Any]:
    transport = StreamableHttpTransport(f"{base}/mcp", headers={"Authorization": f"Bearer {token}"})
    return Client(transport)


async def test_an_api_server_that_cannot_answer_closes_the_door_with_503() -> None:
    async def broken(request: Request) -> Response:
        return JSONResponse({"kind": "Status", "code": 500, "message": "etcd is down"}, 500)

    api = Starlette(routes=[Route("/{path:path}", broken, methods=["POST"])])
    source = MemorySource([state("research", auth_spec=AuthSpec(mode="kubernetes"))])
    async with serve_app(api, path="") as server:
        config = KubeConfig.from_one(cluster=Cluster(server=server.url), user=User(token="registry-token"))
        async with (
            running_registry(source, start_source=False, kubernetes_config=config) as base,
            httpx2.AsyncClient() as http,
        ):
            answer = await http.post(
                f"{base}/mcp", json=PING, headers={**MCP_ACCEPT, "Authorization": "Bearer alice-token"}
            )
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "5"
    assert answer.json()["error"] == "temporarily_unavailable"
    assert "TokenReview" in answer.json()["error_description"]
    assert "alice-token" not in answer.text
