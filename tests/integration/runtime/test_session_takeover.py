"""A request of a session another replica opened is served, not answered 404.

A Service moves a client's connections to another pod in the middle of its MCP session (a
rollout, a drain, a lost node) and the MCP SDK's client opens a new connection per request, so
the session's next request reaches a pod that never had it. Before, that pod answered 404
`Session not found` and a plain MCP client failed the call (a fresh-clone CI run of the rollout
test: 1 of 31 new clients, 2026-11-29). Now the pod takes the session on under the same id, ready
at once; ids it did not issue, or issued and closed, stay unknown (404), and a taken-on session
belongs to the credential that brought it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import uuid

import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_api.fields import SessionLimits
from pallas_runtime.edge.sessions import SessionTable, serve_sessions
from tests.integration.security.test_sessions import ACCEPT, PROTOCOL, oidc_auth, open_session
from tests.support import mcp_servers as ms
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.oidc import oidc_issuer
from tests.support.replicas import Replica, ReplicaSet


def another_replicas_session() -> str:
    return uuid.uuid4().hex  # what the MCP SDK issues


_ids = itertools.count(100)


async def ping(http: httpx2.AsyncClient, url: str, session: str, token: str | None = None) -> int:
    """A ping on `session` (each with an id of its own, as a client sends them); its HTTP status."""
    headers = {**ACCEPT, "mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    message = {"jsonrpc": "2.0", "id": next(_ids), "method": "ping"}
    return (await http.post(url, json=message, headers=headers)).status_code


def tables_replica(name: str, tables: list[SessionTable]) -> Replica:
    mcp = ms.peer_agent_mcp(name)
    app = mcp.http_app(path="/mcp")
    serve_sessions(app, mcp, SessionLimits(), serving=lambda t: tables.append(t) if t is not None else None)
    return Replica(app)


async def test_a_plain_client_whose_session_moves_to_another_replica_goes_on_there() -> None:
    tables: list[SessionTable] = []
    replicas = ReplicaSet([tables_replica(f"r{i}", tables) for i in range(2)], route="request")
    async with (
        ms.serve_app(replicas) as srv,
        Client(StreamableHttpTransport(srv.url), mode="legacy", timeout=10) as client,
    ):
        await client.list_tools()
        replicas.current = 1  # the Service now sends this client's connections elsewhere
        for n in range(3):
            result = await client.call_tool("send_message", {"message": f"after the move {n}"})
            assert json.loads(result.content[0].text)["message"] == f"after the move {n}"
        assert {t.name for t in await client.list_tools()} == {"send_message", "get_health"}
    assert [r.method for r in replicas.routed if r.replica == 0 and r.method is not None] == [
        "initialize",
        "notifications/initialized",
        "tools/list",
    ]
    assert replicas.calls(1) == 3
    assert [r for r in replicas.routed if r.status == 404] == []


async def test_a_session_another_replica_opened_is_served_at_once(fake_openai: FakeOpenAI) -> None:
    fake_openai.default = lambda request: Text("on it")
    session = another_replicas_session()
    async with (
        serve_agent(agent_config(fake_openai.base_url)) as agent,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        headers = {**ACCEPT, "mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
        listed = await http.post(
            agent.url, json={"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, headers=headers
        )
        assert listed.status_code == 200, listed.text
        assert listed.headers["mcp-session-id"] == session
        assert "send_message" in listed.text
        params = {"name": "send_message", "arguments": {"message": "go on"}}
        call = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": params}
        answered = await http.post(agent.url, json=call, headers=headers)
        assert answered.status_code == 200
        assert "on it" in answered.text
        # It is a session like any other: its client ends it, and then it is gone here.
        ended = await http.delete(agent.url, headers=headers)
        assert ended.status_code == 200
        assert await ping(http, agent.url, session) == 404


async def test_ids_it_did_not_issue_or_has_closed_stay_unknown(fake_openai: FakeOpenAI) -> None:
    async with (
        serve_agent(agent_config(fake_openai.base_url)) as agent,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        assert await ping(http, agent.url, "not-an-id-any-agent-issues") == 404
        assert await ping(http, agent.url, another_replicas_session().upper()) == 404
        # A session it opened and its client deleted stays deleted.
        own = await open_session(http, agent.url)
        headers = {**ACCEPT, "mcp-session-id": own, "mcp-protocol-version": PROTOCOL}
        assert (await http.delete(agent.url, headers=headers)).status_code == 200
        assert await ping(http, agent.url, own) == 404
        # Nothing is taken on by a DELETE.
        headers["mcp-session-id"] = another_replicas_session()
        assert (await http.delete(agent.url, headers=headers)).status_code == 404
        assert await ping(http, agent.url, headers["mcp-session-id"]) == 200  # then a POST takes it on


async def test_a_taken_on_session_belongs_to_the_credential_that_brought_it() -> None:
    session = another_replicas_session()
    async with oidc_issuer() as issuer:
        auth = oidc_auth(issuer)
        config = agent_config(
            "http://127.0.0.1:9/v1", name="research", auth=auth, sessions={"maxPerCaller": 2}
        )
        alice, bob = issuer.token(sub="alice"), issuer.token(sub="bob")
        async with serve_agent(config) as agent, httpx2.AsyncClient(timeout=10) as http:
            assert await ping(http, agent.url, session) == 401  # no credential: nothing is taken on
            assert await ping(http, agent.url, session, alice) == 200
            assert await ping(http, agent.url, session, bob) == 404  # as the SDK answers a stranger
            assert await ping(http, agent.url, session, alice) == 200
            # Taken-on sessions count against the caller's cap like those it opened.
            more = [another_replicas_session() for _ in range(2)]
            assert [await ping(http, agent.url, s, alice) for s in more] == [200, 200]
            assert await ping(http, agent.url, session, alice) == 404  # its idlest made room


async def test_a_request_refused_before_the_session_began_leaves_its_id_free(fake_openai: FakeOpenAI) -> None:
    session = another_replicas_session()
    async with serve_agent(agent_config(fake_openai.base_url)) as agent, httpx2.AsyncClient() as http:
        headers = {"Accept": "text/plain", "mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
        refused = await http.post(
            agent.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers
        )
        assert refused.status_code == 406, refused.text  # the transport wants JSON and SSE accepted
        # Nothing began: the client's next, well-formed request takes the session on.
        assert await ping(http, agent.url, session) == 200


async def test_a_table_closing_its_sessions_takes_none_on() -> None:
    tables: list[SessionTable] = []
    replica = tables_replica("r0", tables)
    async with ms.serve_app(ReplicaSet([replica])) as srv, httpx2.AsyncClient(timeout=10) as http:
        assert await ping(http, srv.url, another_replicas_session()) == 200
        (table,) = tables
        assert await table.close_all(quiet=0, patience=1) == 1
        assert await ping(http, srv.url, another_replicas_session()) == 404


async def test_requests_of_one_session_arriving_at_once_are_all_served_on_one_taken_on_session(
    fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # A client that moved pods sends its notification stream and its next calls at once. Before,
    # the session was registered before its transport was connected, and a request of it in
    # between was answered 500 ("No read stream writer available").
    caplog.set_level(logging.INFO, logger="pallas.sessions")
    session = another_replicas_session()
    async with (
        serve_agent(agent_config(fake_openai.base_url)) as agent,
        httpx2.AsyncClient(timeout=10) as http,
    ):

        async def notification_stream() -> int:
            headers = {
                "Accept": "text/event-stream",
                "mcp-session-id": session,
                "mcp-protocol-version": PROTOCOL,
            }
            async with http.stream("GET", agent.url, headers=headers) as response:
                return response.status_code

        statuses = await asyncio.gather(
            notification_stream(), *(ping(http, agent.url, session) for _ in range(8))
        )
    assert statuses == [200] * 9
    assert len([r for r in caplog.records if r.getMessage().startswith("took on MCP session")]) == 1
