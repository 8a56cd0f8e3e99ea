"""Agents in `auth.mode: kubernetes` against the real API server of the local control plane.

The agents run in this process (a `pallas agent` process for the log check) with the
credentials of a ServiceAccount bound to `system:auth-delegator`, as the operator sets them up;
callers are ServiceAccounts with Roles granting verb `invoke` on named PallasAgents, their
tokens minted by the TokenRequest API (`kubectl create token`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
import yaml
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_api.config import AgentConfig
from tests.support.access import KubeAccess, tcp_proxy
from tests.support.agents import (
    QUIET_FASTMCP_ENV,
    ServedAgent,
    agent_config,
    pallas_argv,
    run_agent_process,
    serve_agent,
)
from tests.support.cluster import LocalCluster
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import INITIALIZE


def k8s_config(llm_url: str, name: str, namespace: str, **extra: Any) -> AgentConfig:
    auth = {"mode": "kubernetes", "namespace": namespace, "resource": f"http://{name}.{namespace}.test/mcp"}
    auth.update(extra.pop("auth", {}))
    return agent_config(llm_url, name=name, **extra, auth=auth)


@pytest.fixture
def access(
    kube_cluster: LocalCluster, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KubeAccess]:
    """The namespace's identities: `agents` (what agents run as), alice, bob and carol."""
    world = KubeAccess(kube_cluster, namespace)
    world.service_account("agents", "alice", "bob", "carol")
    world.delegate("agents")
    world.allow("alice", "researcher")
    world.allow("bob", "orchestrator")
    world.allow("carol", "orchestrator", "researcher")
    # In-process agents find their credentials as a pod would: KubeConfig.from_env().
    monkeypatch.setenv("KUBECONFIG", str(world.kubeconfig("agents", tmp_path)))
    try:
        yield world
    finally:
        world.cleanup()


async def initialize(url: str, token: str | None) -> httpx2.Response:
    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(url, json=INITIALIZE, headers=headers)


async def say(url: str, token: str, message: str) -> str:
    transport = StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"})
    async with Client(transport, timeout=60) as client:
        result = await client.call_tool("send_message", {"message": message})
    return str(result.content[0].text)


def read_yaml(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(data))


def brain(request: dict[str, Any]) -> Text | ToolCalls:
    """One fake LLM for both agents: the orchestrator asks the researcher, who answers."""
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Text(f"the researcher said: {last['content']}")
    tools = [t["function"]["name"] for t in request.get("tools") or []]
    if "researcher__send_message" in tools:
        return ToolCalls([Call("researcher__send_message", {"message": "look it up"})])
    return Text("Plato wrote it")


@contextlib.asynccontextmanager
async def team(namespace: str, **auth: Any) -> AsyncIterator[tuple[ServedAgent, ServedAgent]]:
    """A researcher and an orchestrator that may ask it, both in kubernetes mode."""
    async with (
        FakeOpenAI(default=brain) as llm,
        serve_agent(k8s_config(llm.base_url, "researcher", namespace, auth=auth)) as researcher,
    ):
        peers = [{"name": "researcher", "url": researcher.url}]
        orchestrator_config = k8s_config(llm.base_url, "orchestrator", namespace, auth=auth, agents=peers)
        async with serve_agent(orchestrator_config) as orchestrator:
            yield researcher, orchestrator


async def test_rbac_invoke_decides_who_talks_to_which_agent(access: KubeAccess, namespace: str) -> None:
    alice = access.token("alice")
    async with team(namespace) as (researcher, orchestrator):
        assert await say(researcher.url, alice, "who wrote The Republic?") == "Plato wrote it"
        refused = await initialize(orchestrator.url, alice)
        assert refused.status_code == 403
        assert refused.headers["www-authenticate"].startswith('Bearer error="insufficient_scope"')
        assert 'resource_metadata="http://orchestrator.' in refused.headers["www-authenticate"]


async def test_a_caller_cannot_reach_through_an_orchestrator_an_agent_it_may_not_call(
    access: KubeAccess, namespace: str
) -> None:
    bob, carol = access.token("bob"), access.token("carol")
    async with team(namespace) as (researcher, orchestrator):
        served = researcher.metrics.send_message_total.labels("researcher", "ok")
        # bob may talk to the orchestrator only; the researcher refuses him directly.
        assert (await initialize(researcher.url, bob)).status_code == 403
        # Through the orchestrator, first: the researcher refuses even to list its tools for
        # bob's forwarded bearer, so the model is not offered it and answers alone.
        assert await say(orchestrator.url, bob, "ask the researcher") == "Plato wrote it"
        assert served._value.get() == 0
        # carol may talk to both: the same path reaches the researcher (and fills the tool cache).
        assert (
            await say(orchestrator.url, carol, "ask the researcher") == "the researcher said: Plato wrote it"
        )
        assert served._value.get() == 1
        # Now the model is offered the researcher for bob too, calls it, and the researcher says no.
        answer = await say(orchestrator.url, bob, "ask the researcher")
        assert answer == "the researcher said: Error: researcher: calling send_message failed: HTTP 403"
        assert served._value.get() == 1
        denied = researcher.metrics.auth_requests_total.labels("researcher", "denied")._value.get()
    assert denied == 3  # bob directly, bob's listing, bob's call


async def test_no_foreign_or_expired_token_gets_in(access: KubeAccess, namespace: str) -> None:
    async with team(namespace) as (researcher, _):
        missing = await initialize(researcher.url, None)
        assert missing.status_code == 401
        metadata = f"http://researcher.{namespace}.test/.well-known/oauth-protected-resource/mcp"
        assert missing.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata}"'
        foreign = await initialize(
            researcher.url, access.token("alice", audience="https://elsewhere.example")
        )
        assert foreign.status_code == 401
        assert foreign.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
        key = access.signing_key()
        if key is None:
            pytest.skip("needs the local control plane's ServiceAccount signing key")
        real = access.token("alice")
        # The same token re-signed unchanged is accepted: only the expiry differs below.
        assert (await initialize(researcher.url, access.resigned(real, key))).status_code == 200
        assert (await initialize(researcher.url, access.expired_copy(real, key))).status_code == 401


async def test_a_dedicated_audience_refuses_api_server_tokens(access: KubeAccess, namespace: str) -> None:
    async with team(namespace, kubernetes={"audiences": ["pallas.dev"]}) as (researcher, _):
        assert (await initialize(researcher.url, access.token("alice"))).status_code == 401
        assert (
            await initialize(researcher.url, access.token("alice", audience="pallas.dev"))
        ).status_code == 200


async def test_an_api_server_outage_fails_closed_with_503_and_degrades_health(
    access: KubeAccess, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents_config = read_yaml(access.kubeconfig("agents", tmp_path))
    server = urlsplit(agents_config["clusters"][0]["cluster"]["server"])
    async with tcp_proxy(server.hostname or "127.0.0.1", server.port or 443) as proxy:
        agents_config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        path = tmp_path / "via-proxy"
        write_yaml(path, agents_config)
        monkeypatch.setenv("KUBECONFIG", str(path))
        alice, carol = access.token("alice"), access.token("carol")
        config = k8s_config(
            "http://127.0.0.1:9/v1", "researcher", namespace, auth={"kubernetes": {"cacheSeconds": 300}}
        )
        async with serve_agent(config) as researcher:
            assert (await initialize(researcher.url, alice)).status_code == 200  # decided, and cached
            await proxy.cut()
            outage = await initialize(researcher.url, carol)
            assert outage.status_code == 503
            assert outage.headers["retry-after"] == "5"
            assert outage.json()["error"] == "temporarily_unavailable"
            assert "the API server did not answer the TokenReview" in outage.json()["error_description"]
            transport = StreamableHttpTransport(researcher.url, headers={"Authorization": f"Bearer {alice}"})
            async with Client(transport, timeout=30) as client:  # alice's decision is still cached
                health = json.loads((await client.call_tool("get_health", {})).content[0].text)
            assert health["status"] == "degraded"
            assert "Access: access checks unavailable" in health["message"]
            assert (await httpx2.AsyncClient().get(researcher.base_url + "/readyz")).status_code == 200


async def test_the_agents_own_rights_missing_is_a_clear_503(
    access: KubeAccess, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(access.kubeconfig("bob", tmp_path)))  # not an auth delegator
    async with serve_agent(k8s_config("http://127.0.0.1:9/v1", "researcher", namespace)) as researcher:
        answer = await initialize(researcher.url, access.token("alice"))
    assert answer.status_code == 503
    assert "tokenreviews and subjectaccessreviews: create" in answer.json()["error_description"]


async def test_tokens_never_reach_the_logs_of_a_pallas_agent_process(
    access: KubeAccess, namespace: str, tmp_path: Path
) -> None:
    alice, bob = access.token("alice"), access.token("bob")
    async with FakeOpenAI(default=Text("hello")) as llm:
        config = k8s_config(llm.base_url, "researcher", namespace)
        kubeconfig = access.kubeconfig("agents", tmp_path)
        own = read_yaml(kubeconfig)["users"][0]["user"]["token"]
        env = {
            "KUBECONFIG": str(kubeconfig),
            "PALLAS_LOG_LEVEL": "DEBUG",
            "PALLAS_ROOT_LOG_LEVEL": "DEBUG",
        }
        async with run_agent_process(config, env=env) as agent:
            assert await say(agent.url, alice, "hi") == "hello"
            statuses = [(await initialize(agent.url, t)).status_code for t in (bob, "not-a-token", alice)]
            metrics = (await httpx2.AsyncClient().get(agent.base_url + "/metrics")).text
            log = agent.stderr()
    assert statuses == [403, 401, 200]
    assert f"system:serviceaccount:{namespace}:bob may not invoke" in log
    for token in (alice, bob, "not-a-token", own):  # callers' tokens and the agent's own
        assert token not in log
        assert token not in metrics


async def pallas_chat(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *pallas_argv(),
        "chat",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **QUIET_FASTMCP_ENV, **env},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode().strip(), err.decode().strip()


async def test_pallas_chat_takes_a_token_or_mints_one_for_a_service_account(
    access: KubeAccess, namespace: str
) -> None:
    admin = {"KUBECONFIG": str(access.cluster.kubeconfig), "PALLAS_TOKEN": ""}
    async with team(namespace) as (researcher, _):
        url = researcher.url
        code, out, err = await pallas_chat(
            "-m", "who?", "--as-serviceaccount", f"{namespace}/alice", url, env=admin
        )
        assert (code, out) == (0, "Plato wrote it"), err
        code, out, _ = await pallas_chat(
            "-m", "who?", url, env={**admin, "PALLAS_TOKEN": access.token("alice")}
        )
        assert (code, out) == (0, "Plato wrote it")
        env = admin  # PALLAS_TOKEN empty: no token unless a flag gives one
        code, _, err = await pallas_chat("-m", "who?", url, env=env)
        assert code == 1
        assert "the agent asks for a bearer token (401)" in err
        code, _, err = await pallas_chat("-m", "who?", "--token", "not-a-token", url, env=env)
        assert (code, err.count("\n")) == (1, 0)
        assert "the agent refused the token (401)" in err
        code, _, err = await pallas_chat("-m", "who?", "--token", access.token("bob"), url, env=env)
        assert code == 1
        assert "may not talk to the agent (403)" in err
        code, _, err = await pallas_chat("-m", "x", "--as-serviceaccount", "nope", url, env=env)
        assert (code, err) == (2, "pallas chat: --as-serviceaccount 'nope': expected NAMESPACE/NAME")
        code, _, err = await pallas_chat(
            "-m", "x", "--as-serviceaccount", f"{namespace}/nobody", url, env=env
        )
        assert code == 1
        assert f"cannot mint a token for ServiceAccount {namespace}/nobody" in err
