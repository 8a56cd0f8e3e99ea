"""Agents in `auth.mode: oidc` over real HTTP, against an issuer the test serves on 127.0.0.1.

Each case is one HTTP exchange with the MCP endpoint (an `initialize`, the first request every
client makes) with one kind of token: the answer must be what the MCP authorization spec asks
for. The issuer publishes its JWKS and discovery document like a real one (tests/support/oidc).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server.dependencies import get_access_token

from pallas_api.config import AgentConfig
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server import agent_app, build_server
from tests.support.agents import agent_config, run_agent_process, serve_agent
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.mcp_servers import INITIALIZE, serve_app
from tests.support.oidc import AUDIENCE, Issuer, oidc_issuer

RESOURCE = "http://research.agents.svc.cluster.local:8000/mcp"
METADATA = "http://research.agents.svc.cluster.local:8000/.well-known/oauth-protected-resource/mcp"
ACCEPT = {"Accept": "application/json, text/event-stream"}


def oidc_config(
    llm_url: str, idp: Issuer, *, access: dict[str, Any] | None = None, **oidc: Any
) -> AgentConfig:
    return agent_config(
        llm_url,
        name="research",
        auth={
            "mode": "oidc",
            "namespace": "agents",
            "resource": RESOURCE,
            "oidc": {"issuer": idp.url, "audience": AUDIENCE, "jwksRefreshSeconds": 0, **oidc},
            "access": access or {},
        },
    )


async def initialize(http: httpx2.AsyncClient, url: str, token: str | None) -> httpx2.Response:
    headers = {**ACCEPT, **({"Authorization": f"Bearer {token}"} if token is not None else {})}
    return await http.post(url, json=INITIALIZE, headers=headers)


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    async with oidc_issuer() as running:
        yield running


@contextlib.asynccontextmanager
async def research(issuer: Issuer, llm_url: str = "http://127.0.0.1:9/v1", **kw: Any) -> AsyncIterator[Any]:
    async with serve_agent(oidc_config(llm_url, issuer, **kw)) as agent, httpx2.AsyncClient() as http:
        yield agent, http


async def test_no_token_gets_401_with_the_resource_metadata_challenge(issuer: Issuer) -> None:
    async with research(issuer) as (agent, http):
        response = await initialize(http, agent.url, None)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{METADATA}"'
        for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
            metadata = (await http.get(agent.base_url + path)).json()
            assert metadata["resource"] == RESOURCE
            assert [s.rstrip("/") for s in metadata["authorization_servers"]] == [issuer.url]
            assert metadata["bearer_methods_supported"] == ["header"]


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("good", 200),
        ("wrong issuer", 401),
        ("wrong audience", 401),
        ("expired", 401),
        ("not yet valid", 401),
        ("no expiry", 401),
        ("unknown kid", 401),
        ("alg none", 401),
        ("HS256 with the public key", 401),
        ("algorithm not allowed", 401),
        ("no subject", 401),
        ("garbage", 401),
    ],
)
async def test_each_kind_of_token_gets_the_right_answer(issuer: Issuer, case: str, status: int) -> None:
    now = int(time.time())
    stranger = Issuer(url=issuer.url)
    stranger.rotate()
    stranger.keys[-1] = type(stranger.keys[-1]).generate_key(
        2048, parameters={"kid": "stranger"}, private=True
    )
    tokens = {
        "good": lambda: issuer.token(),
        "wrong issuer": lambda: issuer.token(iss="https://elsewhere.example/realms/pallas"),
        "wrong audience": lambda: issuer.token(aud="another-api"),
        "expired": lambda: issuer.token(exp=now - 60, iat=now - 600, nbf=now - 600),
        "not yet valid": lambda: issuer.token(nbf=now + 3600, exp=now + 7200),
        "no expiry": lambda: issuer.token(exp=None),
        "unknown kid": lambda: stranger.token(),
        "alg none": lambda: issuer.unsigned_token(),
        "HS256 with the public key": lambda: _hs256_with_public_key(issuer),
        "algorithm not allowed": lambda: issuer.token(alg="RS512"),
        "no subject": lambda: issuer.token(sub=None),
        "garbage": lambda: "not-a-jwt",
    }
    async with research(issuer) as (agent, http):
        response = await initialize(http, agent.url, tokens[case]())
    assert response.status_code == status, response.text
    if status == 401:
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith('Bearer error="invalid_token"')
        assert f'resource_metadata="{METADATA}"' in challenge


def _hs256_with_public_key(issuer: Issuer) -> str:
    """The classic confusion attack: HMAC-sign with the issuer's public key as the secret.

    Written by hand: joserfc itself refuses to make such a key.
    """

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "HS256", "kid": issuer.keys[-1].kid}).encode())
    payload = b64(json.dumps(issuer.claims()).encode())
    secret = issuer.keys[-1].as_pem(private=False)
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(signature)}"


async def test_rotated_keys_are_fetched_again_and_old_ones_dropped(issuer: Issuer) -> None:
    async with research(issuer) as (agent, http):
        old_key = issuer.keys[-1]
        assert (await initialize(http, agent.url, issuer.token())).status_code == 200
        assert issuer.jwks_fetches == 1
        issuer.rotate()  # the issuer now publishes only the new key and signs with it
        assert (await initialize(http, agent.url, issuer.token())).status_code == 200
        assert issuer.jwks_fetches == 2  # an unknown kid made the agent fetch the key set again
        # A token (new to the agent) signed by the retired key: its kid is no longer published.
        assert (await initialize(http, agent.url, issuer.token(key=old_key, sub="bob"))).status_code == 401


async def test_the_refetch_of_an_unknown_kid_is_rate_limited(issuer: Issuer) -> None:
    async with research(issuer, jwksRefreshSeconds=30) as (agent, http):
        assert (await initialize(http, agent.url, issuer.token())).status_code == 200
        stranger = Issuer(url=issuer.url)
        stranger.rotate()
        for n in range(5):  # a flood of made-up key ids costs one JWKS fetch at most
            assert (await initialize(http, agent.url, stranger.token(sub=f"x{n}"))).status_code == 401
        assert issuer.jwks_fetches <= 2


async def test_access_lists_admit_by_subject_or_group_and_refuse_known_callers_with_403(
    issuer: Issuer,
) -> None:
    access = {"subjects": ["carol"], "groups": ["research"]}
    async with research(issuer, access=access, groupsClaim="roles") as (agent, http):
        assert (await initialize(http, agent.url, issuer.token(sub="carol", roles=[]))).status_code == 200
        assert (
            await initialize(http, agent.url, issuer.token(sub="dave", roles=["research"]))
        ).status_code == 200
        refused = await initialize(http, agent.url, issuer.token(sub="erin", roles=["sales"]))
        assert refused.status_code == 403
        assert refused.headers["www-authenticate"].startswith('Bearer error="insufficient_scope"')
        assert f'resource_metadata="{METADATA}"' in refused.headers["www-authenticate"]
        metrics = (await http.get(agent.base_url + "/metrics")).text
    assert 'pallas_auth_requests_total{agent="research",outcome="allowed"} 2.0' in metrics
    assert 'pallas_auth_requests_total{agent="research",outcome="denied"} 1.0' in metrics


async def test_probe_and_metrics_routes_stay_open_whatever_the_bearer(issuer: Issuer) -> None:
    async with research(issuer) as (agent, http):
        for path in ("/healthz", "/readyz", "/metrics"):
            for headers in ({}, {"Authorization": "Bearer scrape-token"}):
                assert (await http.get(agent.base_url + path, headers=headers)).status_code == 200, path


async def test_an_unreachable_issuer_fails_closed_with_503(issuer: Issuer) -> None:
    config = oidc_config("http://127.0.0.1:9/v1", issuer, issuer="http://127.0.0.1:9/realms/x")
    async with serve_agent(config) as agent, httpx2.AsyncClient() as http:
        response = await initialize(http, agent.url, issuer.token())
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    body = response.json()
    assert body["error"] == "temporarily_unavailable"
    assert (
        "discovery document http://127.0.0.1:9/realms/x/.well-known/openid-configuration"
        in body["error_description"]
    )


async def test_the_caller_reaches_tools_as_an_access_token_with_subject_and_groups(issuer: Issuer) -> None:
    """What the conversation store (issue 10) reads: `get_access_token()` inside a tool."""
    server = build_server(oidc_config("http://127.0.0.1:9/v1", issuer), metrics=RuntimeMetrics(), environ={})

    @server.mcp.tool(name="whoami", output_schema=None)
    def whoami() -> str:
        token = get_access_token()
        assert token is not None
        return json.dumps({"client_id": token.client_id, "claims": token.claims, "scopes": token.scopes})

    async with serve_app(agent_app(server)) as running:
        raw = issuer.token(sub="alice", groups=["research", "ops"])
        transport = StreamableHttpTransport(running.url, headers={"Authorization": f"Bearer {raw}"})
        async with Client(transport, timeout=30) as client:
            seen = json.loads((await client.call_tool("whoami", {})).content[0].text)
    assert seen == {
        "client_id": "alice",
        "claims": {"sub": "alice", "groups": ["research", "ops"], "iss": issuer.url},
        "scopes": ["pallas.dev/invoke"],
    }
    assert raw not in json.dumps(seen)


async def test_tokens_never_reach_logs_metrics_or_answers(issuer: Issuer) -> None:
    async with FakeOpenAI(default=Text("hello")) as llm:
        config = oidc_config(llm.base_url, issuer, access={"subjects": ["alice"]})
        env = {"PALLAS_LOG_LEVEL": "DEBUG", "PALLAS_ROOT_LOG_LEVEL": "DEBUG"}
        async with run_agent_process(config, env=env) as agent, httpx2.AsyncClient() as http:
            good, denied = issuer.token(), issuer.token(sub="mallory")
            expired = issuer.token(exp=int(time.time()) - 60)
            answers = [
                await initialize(http, agent.url, t) for t in (good, denied, expired, "opaque-secret-token")
            ]
            transport = StreamableHttpTransport(agent.url, headers={"Authorization": f"Bearer {good}"})
            async with Client(transport, timeout=30) as client:
                reply = await client.call_tool("send_message", {"message": "hi"})
            metrics = (await http.get(agent.base_url + "/metrics")).text
            log = agent.stderr()
    assert [a.status_code for a in answers] == [200, 403, 401, 401]
    assert reply.content[0].text == "hello"
    assert "research" in log
    assert "mallory may not invoke" in log
    seen_by_llm = json.dumps([r.json for r in llm.requests] + [dict(r.headers) for r in llm.requests])
    for token in (good, denied, expired, "opaque-secret-token"):
        for text in (
            log,
            metrics,
            seen_by_llm,
            *(a.text for a in answers),
            *(str(a.headers) for a in answers),
        ):
            assert token not in text
