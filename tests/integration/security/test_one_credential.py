"""One credential per request: a second `Authorization` header never smuggles another identity.

The attack: alice may talk to an orchestrator, only bob may talk to the researcher behind it.
Alice sends her own token and bob's, each in an `Authorization` header. The agent's bearer
check read the first (alice, allowed), its forwarding the last (bob), so alice reached the
bob-only researcher as bob while the orchestrator's logs named her. Now the second header is
refused with 400 before anything reads either, and nothing reaches the model or the peer.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx2
import pytest

from pallas_api.config import AgentConfig
from tests.support.agents import ServedAgent, agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import INITIALIZE
from tests.support.oidc import AUDIENCE, Issuer, oidc_issuer

ACCEPT = ("Accept", "application/json, text/event-stream")
ASK = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "send_message", "arguments": {"message": "ask the researcher"}},
}
SECRET = "bob's research notes"
RESEARCHER = "You are the researcher."


def oidc_agent(llm_url: str, issuer: Issuer, name: str, **fields: Any) -> AgentConfig:
    auth = {
        "mode": "oidc",
        "namespace": "agents",
        "resource": f"http://{name}.agents.test/mcp",
        "oidc": {"issuer": issuer.url, "audience": AUDIENCE, "jwksRefreshSeconds": 0},
        "access": fields.pop("access", {}),
    }
    return agent_config(llm_url, name=name, auth=auth, **fields)


def brain(request: dict[str, Any]) -> Text | ToolCalls:
    """The orchestrator asks the researcher whenever it is offered; the researcher knows the secret."""
    if request["messages"][0]["content"] == RESEARCHER:
        return Text(SECRET)
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Text(f"the researcher said: {last['content']}")
    tools = [t["function"]["name"] for t in request.get("tools") or []]
    if "researcher__send_message" in tools:
        return ToolCalls([Call("researcher__send_message", {"message": "what do you know?"})])
    return Text("I could not ask the researcher")


@contextlib.asynccontextmanager
async def team(issuer: Issuer, llm: FakeOpenAI) -> AsyncIterator[tuple[ServedAgent, ServedAgent]]:
    """A researcher only bob may call, and an orchestrator every authenticated caller may call."""
    researcher_config = oidc_agent(
        llm.base_url, issuer, "researcher", access={"subjects": ["bob"]}, instruction=RESEARCHER
    )
    async with serve_agent(researcher_config) as researcher:
        peers = [{"name": "researcher", "url": researcher.url}]
        orchestrator_config = oidc_agent(llm.base_url, issuer, "orchestrator", agents=peers)
        async with serve_agent(orchestrator_config) as orchestrator:
            yield researcher, orchestrator


async def ask(url: str, tokens: Sequence[str]) -> list[httpx2.Response]:
    """initialize, initialized and a send_message over raw HTTP, every request with one
    `Authorization` header per token; stops at the first refusal."""
    credentials = [("Authorization", f"Bearer {t}") for t in tokens]
    answers: list[httpx2.Response] = []
    async with httpx2.AsyncClient(timeout=30) as http:
        answers.append(await http.post(url, json=INITIALIZE, headers=[ACCEPT, *credentials]))
        if answers[-1].status_code != 200:
            return answers
        session = [
            ACCEPT,
            *credentials,
            ("Mcp-Session-Id", answers[-1].headers["mcp-session-id"]),
            ("Mcp-Protocol-Version", "2025-11-25"),
        ]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        answers.append(await http.post(url, json=initialized, headers=session))
        answers.append(await http.post(url, json=ASK, headers=session))
    return answers


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    async with oidc_issuer() as running:
        yield running


def allowed(agent: ServedAgent) -> float:
    return float(agent.metrics.auth_requests_total.labels(agent.config.name, "allowed")._value.get())


async def test_a_second_authorization_header_is_refused_and_reaches_no_model_or_peer(
    issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pallas.audit")
    alice, bob = issuer.token(sub="alice"), issuer.token(sub="bob")
    async with FakeOpenAI(default=brain) as llm, team(issuer, llm) as (researcher, orchestrator):
        answers = await ask(orchestrator.url, [alice, bob])
        smuggled_llm_calls = len(llm.completions)
        async with httpx2.AsyncClient() as http:
            metrics = (await http.get(orchestrator.base_url + "/metrics")).text
        reached_researcher = allowed(researcher)
        # The same request with alice's token alone is served: the 400 is about the second header.
        alone = await ask(orchestrator.url, [alice])

    assert [a.status_code for a in answers] == [400]
    refusal = answers[0].json()
    assert refusal == {
        "error": "invalid_request",
        "error_description": "the request carries 2 Authorization headers; send exactly one credential "
        "(Authorization: Bearer <token>)",
    }
    for token in (alice, bob):
        assert token not in answers[0].text
        assert token not in str(answers[0].headers)
    assert smuggled_llm_calls == 0
    assert reached_researcher == 0
    assert 'pallas_requests_refused_total{agent="orchestrator",reason="credentials"} 1.0' in metrics
    # Alone, alice is alice: the researcher refuses to list its tools for her, so the model is
    # never offered it and no tool call is made (or audited) in anybody's name.
    assert [a.status_code for a in alone] == [200, 202, 200]
    assert "I could not ask the researcher" in alone[-1].text
    assert SECRET not in alone[-1].text
    assert [r.getMessage() for r in caplog.records if r.name == "pallas.audit"] == []


async def test_with_one_header_the_peer_gets_exactly_the_verified_bearer(issuer: Issuer) -> None:
    bob = issuer.token(sub="bob")
    async with FakeOpenAI(default=brain) as llm, team(issuer, llm) as (researcher, orchestrator):
        answers = await ask(orchestrator.url, [bob])
        reached = allowed(researcher)
    assert [a.status_code for a in answers] == [200, 202, 200]
    assert f"the researcher said: {SECRET}" in answers[-1].text
    assert reached >= 1
