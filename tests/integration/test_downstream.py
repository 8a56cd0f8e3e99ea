"""McpServerSource and PeerAgentSource against real MCP servers on 127.0.0.1.

The servers are fastmcp apps from tests/support/mcp_servers.py (served by uvicorn in this event
loop) and the reference @modelcontextprotocol/server-everything (a Node process). The auth tests
are the point of this file: a forwarded bearer must reach exactly its own call, and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import defaultdict

import pytest

from pallas_api.config import AgentConfig, DownstreamServer, HeaderConfig, PeerAgent
from pallas_io.probe import NOT_MCP
from pallas_runtime.agent.live import default_parts
from pallas_runtime.downstream.mcp_server import McpServerSource
from pallas_runtime.downstream.peer_agent import PeerAgentSource
from pallas_runtime.downstream.remote import RemoteMcpSource
from pallas_runtime.downstream.source import DownstreamError, Onward
from pallas_runtime.messages import ImagePart, TextPart
from tests.support import mcp_peers as peers
from tests.support import mcp_servers as ms
from tests.support.ports import closed_port

LOG = "pallas.downstream"


# sse-starlette (inside the test servers) keeps one shutdown watcher per event loop on purpose.
_LOOP_SINGLETONS = {"_shutdown_watcher"}


@pytest.fixture(autouse=True)
async def no_leaked_tasks():
    """Every task a test started (sources, sessions, servers) is finished when it ends."""
    before = asyncio.all_tasks()
    yield
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 3
    while True:
        current = asyncio.current_task()
        leftover = [
            t
            for t in asyncio.all_tasks() - before
            if t is not current and not t.done() and t.get_coro().__qualname__ not in _LOOP_SINGLETONS
        ]
        if not leftover or loop.time() > deadline:
            break
        await asyncio.sleep(0.02)
    assert not leftover, [t.get_coro() for t in leftover]


@pytest.fixture(scope="module")
def everything():
    with peers.run_server_everything(peers.install_mcp_peers()) as server:
        yield server


@contextlib.asynccontextmanager
async def server_source(url, *, name="svc", environ=None, probe_timeout=1.0, **fields):
    source = McpServerSource(
        DownstreamServer(name=name, url=url, **fields),
        probe_timeout=probe_timeout,
        environ={} if environ is None else environ,
    )
    try:
        yield source
    finally:
        await source.aclose()


@contextlib.asynccontextmanager
async def peer_source(url, **fields):
    source = PeerAgentSource(PeerAgent(name="helper", url=url, **fields), probe_timeout=1.0)
    try:
        yield source
    finally:
        await source.aclose()


def echoed(outcome):
    assert not outcome.is_error, outcome
    (part,) = outcome.content
    return json.loads(part.text)


def bearers(n):
    return [f"Bearer user{i:02d}-token" for i in range(n)]


def posts(server):
    return len(server.received("POST"))


# --- tools: listing, caching, calling -------------------------------------------------------


async def test_list_tools_returns_remote_tools_and_caches_them():
    async with ms.header_echo_server() as srv, server_source(srv.url, name="echo") as source:
        (tool,) = await source.list_tools()
        assert (tool.source, tool.name, tool.qualified_name) == ("echo", "echo_headers", "echo__echo_headers")
        assert tool.description.startswith("Report the credential headers")
        assert tool.input_schema["type"] == "object"
        assert "delay" in tool.input_schema["properties"]
        seen = posts(srv)
        assert await source.list_tools() == [tool]
        assert posts(srv) == seen, "the second list_tools must come from the cache"


async def listed_eventually(source, names, within=30.0):
    """The tools once the background refresh has brought `names` in (list_tools never waits)."""
    deadline = time.monotonic() + within
    while True:
        tools = {t.name: t for t in await source.list_tools()}
        if set(tools) == names or time.monotonic() > deadline:
            return tools
        await asyncio.sleep(0.02)


async def test_list_changed_notification_refreshes_the_cache():
    async with ms.list_changed_server() as srv, server_source(srv.url) as source:
        assert [t.name for t in await source.list_tools()] == ["add_tool"]
        outcome = await source.call_tool("add_tool", {"name": "fresh"}, Onward())
        assert outcome.content == (TextPart("added fresh"),)
        tools = await listed_eventually(source, {"add_tool", "fresh"})
        assert set(tools) == {"add_tool", "fresh"}
        assert tools["fresh"].description == "added at runtime: fresh"


async def test_list_changed_seen_on_a_forwarded_call_refreshes_too():
    async with (
        ms.list_changed_server() as srv,
        server_source(srv.url, forward_inbound_auth=True) as source,
    ):
        await source.list_tools()
        await source.call_tool("add_tool", {"name": "other"}, Onward(credential="Bearer a", on_progress=None))
        assert set(await listed_eventually(source, {"add_tool", "other"})) == {"add_tool", "other"}


async def test_failed_call_refreshes_the_cache_in_the_background():
    # 2 s: room for the first listing on a loaded machine, still well under the call's sleep.
    async with ms.slow_server() as srv, server_source(srv.url, timeout_seconds=2.0) as source:
        listed = await source.list_tools()
        with pytest.raises(DownstreamError):
            await source.call_tool("sleep", {"seconds": 5}, Onward())
        seen = posts(srv)
        assert await source.list_tools() == listed  # the cached list, at once
        for _ in range(250):  # the refresh runs in the background: up to 5 s
            if posts(srv) > seen:
                break
            await asyncio.sleep(0.02)
        assert posts(srv) > seen, "list_tools after a failed call must ask the server again"


async def test_a_hanging_server_costs_its_timeout_once_not_on_every_listing():
    async with ms.silent_server() as srv, server_source(srv.url, name="hung", timeout_seconds=0.5) as source:
        started = time.monotonic()
        with pytest.raises(DownstreamError, match="hung: listing tools"):
            await source.list_tools()  # never listed: the first listing is waited for
        assert 0.4 < time.monotonic() - started < 3
        for _ in range(5):
            started = time.monotonic()
            with pytest.raises(DownstreamError, match="hung: listing tools"):
                await source.list_tools()
            assert time.monotonic() - started < 0.1, "a known failure is reported without waiting"


async def test_a_server_that_hangs_after_listing_keeps_its_tools_without_waiting():
    # 2 s: room for the first listing on a loaded machine, still well under the call's sleep.
    async with ms.slow_server() as srv, server_source(srv.url, timeout_seconds=2.0) as source:
        listed = await source.list_tools()
        with pytest.raises(DownstreamError):  # a failed call marks the list stale
            await source.call_tool("sleep", {"seconds": 5}, Onward())
        for _ in range(5):
            started = time.monotonic()
            assert await source.list_tools() == listed
            assert time.monotonic() - started < 0.1


async def test_image_content_comes_back_as_image_part():
    async with ms.image_server() as srv, server_source(srv.url) as source:
        outcome = await source.call_tool("picture", {}, Onward())
        assert outcome.content == (TextPart("a pixel"), ImagePart(data=ms.TINY_PNG, mime_type="image/png"))
        assert not outcome.is_error


async def test_the_servers_own_blocks_and_structured_content_travel_beside_the_models_parts():
    """For execute_tool's clients (seed 003): the model gets notes, the gateway the server's blocks."""
    async with ms.image_server() as srv, server_source(srv.url) as source:
        outcome = await source.call_tool("media", {}, Onward())
    assert [type(part) for part in outcome.content] == [TextPart, TextPart]  # notes for the model
    assert outcome.blocks is not None
    assert [block.type for block in outcome.blocks] == ["audio", "resource_link"]
    assert outcome.structured == {"count": 2}


async def test_tool_error_is_an_outcome_not_an_exception():
    async with ms.error_server() as srv, server_source(srv.url) as source:
        outcome = await source.call_tool("fail", {"message": "no such city"}, Onward())
        assert outcome.is_error
        assert outcome.content == (TextPart("no such city"),)
        # The session survives a tool error.
        again = await source.call_tool("fail", {"message": "still"}, Onward())
        assert again.content == (TextPart("still"),)


async def test_progress_is_relayed_on_shared_and_forwarded_calls():
    async with ms.progress_server() as srv, server_source(srv.url, forward_inbound_auth=True) as source:
        for inbound in (None, "Bearer someone"):
            got = []

            async def on_progress(progress, total, message, got=got):
                got.append((progress, total, message))

            outcome = await source.call_tool("work", {}, Onward(credential=inbound, on_progress=on_progress))
            assert outcome.content == (TextPart("worked"),)
            assert got == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_a_failing_progress_handler_does_not_fail_the_call(caplog):
    async def broken(progress, total, message):
        raise RuntimeError("handler bug")

    async with ms.progress_server() as srv, server_source(srv.url) as source:
        outcome = await source.call_tool("work", {}, Onward(on_progress=broken))
        assert outcome.content == (TextPart("worked"),)
    assert "progress handler failed (RuntimeError)" in caplog.text


# --- timeouts and failures --------------------------------------------------------------------


@pytest.mark.parametrize("inbound", [None, "Bearer x"], ids=["shared-session", "own-session"])
async def test_call_times_out_after_the_configured_timeout(inbound):
    async with (
        ms.slow_server() as srv,
        server_source(srv.url, name="slow", timeout_seconds=0.3, forward_inbound_auth=True) as source,
    ):
        started = time.monotonic()
        with pytest.raises(DownstreamError) as err:
            await source.call_tool("sleep", {"seconds": 5}, Onward(credential=inbound))
        assert str(err.value) == "slow: sleep timed out after 0.3s"
        assert time.monotonic() - started < 1.5
        # The source stays usable.
        outcome = await source.call_tool("sleep", {"seconds": 0}, Onward(credential=inbound))
        assert outcome.content == (TextPart("slept 0.0s"),)


async def test_connection_refused_is_a_short_downstream_error():
    with closed_port() as port:
        await _refused_everywhere(f"http://127.0.0.1:{port}/mcp")


async def _refused_everywhere(url: str) -> None:
    async with server_source(url, name="gone", forward_inbound_auth=True) as source:
        with pytest.raises(DownstreamError) as err:
            await source.list_tools()
        assert str(err.value) == "gone: listing tools failed: connection refused"
        for inbound in (None, "Bearer secret-token"):
            with pytest.raises(DownstreamError) as err:
                await source.call_tool("echo", {}, Onward(credential=inbound))
            assert str(err.value) == "gone: calling echo failed: connection refused"
            assert err.value.__cause__ is None
            assert err.value.__suppress_context__


@pytest.mark.parametrize("inbound", [None, "Bearer rejected"])
async def test_http_error_status_is_named(inbound):
    async with (
        ms.status_server(401, "no") as srv,
        server_source(srv.url, name="locked", forward_inbound_auth=True) as source,
    ):
        with pytest.raises(DownstreamError) as err:
            await source.call_tool("echo", {}, Onward(credential=inbound))
        assert str(err.value) == "locked: calling echo failed: HTTP 401"
        assert "rejected" not in str(err.value)


async def test_reconnects_after_the_server_restarts():
    # The first server takes a port from the OS; the restarted one reuses it (SO_REUSEADDR).
    first_server = contextlib.AsyncExitStack()
    port = (await first_server.enter_async_context(ms.slow_server())).port
    url = f"http://127.0.0.1:{port}/mcp"
    async with server_source(url, name="flaky", timeout_seconds=3) as source:
        try:
            first = await source.call_tool("sleep", {"seconds": 0}, Onward())
            assert first.content == (TextPart("slept 0.0s"),)
        finally:
            await first_server.aclose()
        with pytest.raises(DownstreamError, match=r"^flaky: calling sleep failed: "):
            await source.call_tool("sleep", {"seconds": 0}, Onward())
        async with ms.slow_server(port=port) as srv:
            # A new server process knows nothing of the old session: the source starts a new one.
            again = await source.call_tool("sleep", {"seconds": 0}, Onward())
            assert again.content == (TextPart("slept 0.0s"),)
            assert [t.name for t in await source.list_tools()] == ["sleep"]
            assert srv.received("POST")


async def test_a_session_the_server_forgot_is_replaced_and_the_call_retried(caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    first_server = contextlib.AsyncExitStack()
    port = (await first_server.enter_async_context(ms.slow_server())).port
    url = f"http://127.0.0.1:{port}/mcp"
    async with server_source(url, name="restarting") as source:
        try:
            await source.call_tool("sleep", {"seconds": 0}, Onward())
        finally:
            await first_server.aclose()
        async with ms.slow_server(port=port) as srv:
            # No call failed in between: the source still holds the old session id, the new
            # server answers 404 for it, and the source reconnects and retries transparently.
            outcome = await source.call_tool("sleep", {"seconds": 0}, Onward())
            assert outcome.content == (TextPart("slept 0.0s"),)
            sessions = {r.headers.get("mcp-session-id") for r in srv.received("POST")}
            assert len(sessions - {None}) == 2, "one POST with the stale id, then a new session"
    assert "session ended by the server; trying again on a new session" in caplog.text


async def test_closed_source_refuses_calls():
    async with ms.slow_server() as srv:
        source = McpServerSource(DownstreamServer(name="s", url=srv.url), probe_timeout=1, environ={})
        await source.list_tools()
        await source.aclose()
        with pytest.raises(DownstreamError, match="the source is closed"):
            await source.call_tool("sleep", {"seconds": 0}, Onward())
        assert len(srv.received("DELETE")) == 1, "closing must end the shared session"


# --- auth and headers: the bearer goes to its own call and nowhere else ---------------------


async def test_forwarded_bearers_never_cross_between_concurrent_calls():
    tokens = bearers(48)
    async with (
        ms.header_echo_server() as srv,
        server_source(
            srv.url,
            forward_inbound_auth=True,
            headers=[HeaderConfig(name="X-Api-Key", value="service-key")],
        ) as source,
    ):
        await source.list_tools()  # the shared session is open while the forwarded calls run
        forwarded = [source.call_tool("echo_headers", {"delay": 0.05}, Onward(credential=t)) for t in tokens]
        anonymous = [source.call_tool("echo_headers", {"delay": 0.05}, Onward()) for _ in range(8)]
        results = await asyncio.gather(*forwarded, *anonymous)

    for token, outcome in zip(tokens, results[: len(tokens)], strict=True):
        assert echoed(outcome) == {"authorization": token, "x_api_key": "service-key"}
    for outcome in results[len(tokens) :]:
        assert echoed(outcome) == {"authorization": None, "x_api_key": "service-key"}

    # Server side: every session saw at most one Authorization value, and each bearer had its own.
    by_session = defaultdict(set)
    for request in srv.requests:
        if sid := request.headers.get("mcp-session-id"):
            by_session[sid].add(request.headers.get("authorization"))
    assert all(len(auths) == 1 for auths in by_session.values()), by_session
    sessions_per_bearer = defaultdict(int)
    for (auth,) in by_session.values():
        sessions_per_bearer[auth] += 1
    assert sessions_per_bearer.pop(None) == 1, "calls without a bearer share one session"
    assert sessions_per_bearer == dict.fromkeys(tokens, 1)
    # Each bearer's session was ended when its call was over.
    deleted = {r.headers.get("authorization") for r in srv.received("DELETE")}
    assert set(tokens) <= deleted


async def test_forwarded_calls_open_sessions_not_connections():
    async with (
        ms.header_echo_server() as srv,
        server_source(srv.url, forward_inbound_auth=True) as source,
    ):
        await source.list_tools()
        for token in bearers(10):  # ten calls, each with a session of its own
            outcome = await source.call_tool("echo_headers", {"delay": 0}, Onward(credential=token))
            assert echoed(outcome)["authorization"] == token
    sessions = {r.headers["mcp-session-id"] for r in srv.requests if "mcp-session-id" in r.headers}
    connections = {r.client_port for r in srv.requests}
    assert len(sessions) == 11  # the shared one and one per call
    # POSTs and DELETEs of every session share kept-alive connections; what remains is a
    # connection per session for its standing GET stream. (A connection per request was 44.)
    assert len(connections) <= len(sessions) + 2, connections


async def test_health_probes_reuse_the_sources_connections():
    async with ms.header_echo_server() as srv, server_source(srv.url) as source:
        for _ in range(10):
            assert (await source.probe()).ok
    initializes = [r for r in srv.requests if r.method == "POST"]
    deletes = [r for r in srv.requests if r.method == "DELETE"]
    assert len(initializes) == len(deletes) == 10  # each probe still opens and ends a session
    # Ten probes, two requests each, over kept-alive connections (a connection per probe was 10).
    assert len({r.client_port for r in srv.requests}) <= 2


async def test_non_forwarding_source_never_sends_the_inbound_bearer():
    tokens = bearers(40)
    async with (
        ms.header_echo_server() as srv,
        server_source(srv.url, headers=[HeaderConfig(name="X-Api-Key", value="k")]) as source,
    ):
        results = await asyncio.gather(
            *(source.call_tool("echo_headers", {}, Onward(credential=t)) for t in tokens)
        )
    assert all(echoed(r) == {"authorization": None, "x_api_key": "k"} for r in results)
    assert not any("authorization" in r.headers for r in srv.requests)


@pytest.mark.parametrize("header_name", ["Authorization", "authorization", "AUTHORIZATION"])
async def test_explicit_authorization_header_wins_over_forwarding(header_name):
    async with (
        ms.header_echo_server() as srv,
        server_source(
            srv.url,
            forward_inbound_auth=True,
            headers=[HeaderConfig(name=header_name, value="Bearer service-account")],
        ) as source,
    ):
        assert not source.forwards_inbound_auth
        results = await asyncio.gather(
            *(source.call_tool("echo_headers", {}, Onward(credential=t)) for t in bearers(5))
        )
    assert all(echoed(r)["authorization"] == "Bearer service-account" for r in results)
    assert {r.headers.get("authorization") for r in srv.requests} == {"Bearer service-account"}


async def test_env_headers_resolve_and_an_unset_variable_warns_once_without_values(caplog):
    caplog.set_level(logging.DEBUG)
    headers = [
        HeaderConfig(name="X-Api-Key", value_from_env="ECHO_API_KEY"),
        HeaderConfig(name="X-Team-Token", value_from_env="ECHO_TEAM_TOKEN"),
    ]
    async with (
        ms.header_echo_server() as srv,
        server_source(
            srv.url, name="echo", headers=headers, environ={"ECHO_TEAM_TOKEN": "team-secret"}
        ) as source,
    ):
        for _ in range(3):
            outcome = await source.call_tool("echo_headers", {}, Onward())
            assert echoed(outcome) == {"authorization": None, "x_api_key": None}
        assert all(r.headers.get("x-team-token") == "team-secret" for r in srv.received("POST"))
    warnings = [r for r in caplog.records if r.name == LOG and r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "echo: header X-Api-Key is not sent: environment variable ECHO_API_KEY is not set"
    ]
    assert "team-secret" not in caplog.text


async def test_env_header_value_is_sent(monkeypatch):
    monkeypatch.setenv("PALLAS_TEST_ECHO_KEY", "from-process-env")
    async with ms.header_echo_server() as srv:
        source = McpServerSource(
            DownstreamServer(
                name="echo",
                url=srv.url,
                headers=[HeaderConfig(name="X-Api-Key", value_from_env="PALLAS_TEST_ECHO_KEY")],
            ),
            probe_timeout=1,
        )
        try:
            outcome = await source.call_tool("echo_headers", {}, Onward())
        finally:
            await source.aclose()
    assert echoed(outcome)["x_api_key"] == "from-process-env"


async def test_bearers_and_header_values_never_reach_the_logs(caplog):
    # Every logger at DEBUG (ours, the SDK's, httpx2's): the values travel only as HTTP headers.
    # (The slow server's tool does not echo headers, so no payload carries them either.)
    caplog.set_level(logging.DEBUG)
    tokens = bearers(4)
    async with (
        ms.slow_server() as srv,
        server_source(
            srv.url,
            forward_inbound_auth=True,
            timeout_seconds=1.5,  # four sessions opened at once must fit it on a busy machine
            headers=[HeaderConfig(name="X-Api-Key", value="literal-key-value")],
        ) as source,
    ):
        calls = [source.call_tool("sleep", {"seconds": 0}, Onward(credential=t)) for t in tokens]
        await asyncio.gather(*calls)
        with pytest.raises(DownstreamError):
            await source.call_tool("sleep", {"seconds": 5}, Onward(credential=tokens[0]))
        await source.probe()
    async with server_source(srv.url, forward_inbound_auth=True) as gone:  # the server has stopped
        with pytest.raises(DownstreamError):
            await gone.call_tool("sleep", {}, Onward(credential=tokens[1]))
    for secret in [*tokens, "literal-key-value"]:
        assert secret.split()[-1] not in caplog.text


# --- peer agents ------------------------------------------------------------------------------


async def test_peer_agent_offers_only_send_message():
    async with ms.peer_agent_server() as srv, peer_source(srv.url) as source:
        (tool,) = await source.list_tools()
        assert tool.qualified_name == "helper__send_message"
        assert tool.input_schema["required"] == ["message"]
        outcome = await source.call_tool("send_message", {"message": "hi"}, Onward())
        assert echoed(outcome) == {"message": "hi", "authorization": None}


async def test_peer_agent_forwards_each_callers_bearer_by_default():
    tokens = bearers(40)
    async with ms.peer_agent_server() as srv, peer_source(srv.url) as source:
        assert source.forwards_inbound_auth
        results = await asyncio.gather(
            *(
                source.call_tool("send_message", {"message": str(i)}, Onward(credential=t))
                for i, t in enumerate(tokens)
            )
        )
    for i, (token, outcome) in enumerate(zip(tokens, results, strict=True)):
        assert echoed(outcome) == {"message": str(i), "authorization": token}


async def test_peer_agent_without_forwarding_sends_no_bearer():
    async with ms.peer_agent_server() as srv, peer_source(srv.url, forward_inbound_auth=False) as source:
        results = await asyncio.gather(
            *(source.call_tool("send_message", {"message": "x"}, Onward(credential=t)) for t in bearers(10))
        )
    assert all(echoed(r)["authorization"] is None for r in results)
    assert not any("authorization" in r.headers for r in srv.requests)


async def test_peer_without_send_message_offers_nothing_and_warns_once(caplog):
    async with ms.slow_server() as srv, peer_source(srv.url) as source:
        assert await source.list_tools() == []
        assert await source.list_tools() == []
    assert caplog.text.count("offers no send_message tool") == 1


# --- probe ------------------------------------------------------------------------------------


async def test_probe_ok_sends_configured_headers_and_ends_the_session():
    async with (
        ms.header_echo_server() as srv,
        server_source(
            srv.url,
            name="echo",
            forward_inbound_auth=True,
            headers=[HeaderConfig(name="X-Api-Key", value="probe-key")],
        ) as source,
    ):
        result = await source.probe()
        assert (result.source, result.ok, result.message) == ("echo", True, "")
        (init,) = srv.received("POST")
        (delete,) = srv.received("DELETE")
    assert init.headers["x-api-key"] == "probe-key"
    assert "authorization" not in init.headers
    assert "text/event-stream" in init.headers["accept"]
    assert delete.headers["mcp-session-id"]
    assert delete.headers["x-api-key"] == "probe-key"
    assert delete.headers["mcp-protocol-version"]


async def test_probe_connection_refused():
    with closed_port() as port:
        async with server_source(f"http://127.0.0.1:{port}/mcp", name="gone") as source:
            result = await source.probe()
    assert (result.source, result.ok, result.message) == ("gone", False, "connection refused")


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_probe_of_a_server_that_never_answers_returns_within_the_timeout(transport):
    async with (
        ms.silent_server() as srv,
        server_source(srv.url, transport=transport, probe_timeout=0.5) as source,
    ):
        started = time.monotonic()
        result = await source.probe()
        elapsed = time.monotonic() - started
    assert (result.ok, result.message) == (False, "timed out after 0.5s")
    assert elapsed < 0.5 + 0.5


@pytest.mark.parametrize("status", [500, 503])
async def test_probe_http_error(status):
    async with ms.status_server(status) as srv, server_source(srv.url) as source:
        result = await source.probe()
    assert (result.ok, result.message) == (False, f"HTTP {status}")


@pytest.mark.parametrize(
    ("body", "content_type"),
    [('{"hello": "world"}', "application/json"), ("<html></html>", "text/html"), ("{", "application/json")],
)
async def test_probe_of_something_else_is_not_an_mcp_server(body, content_type):
    async with ms.status_server(200, body, content_type) as srv, server_source(srv.url) as source:
        result = await source.probe()
    assert (result.ok, result.message) == (False, NOT_MCP)


async def test_probe_names_an_initialize_error():
    body = '{"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "unsupported"}}'
    async with ms.status_server(200, body, "application/json") as srv, server_source(srv.url) as source:
        result = await source.probe()
    assert (result.ok, result.message) == (False, "initialize failed: unsupported")


async def test_peer_agent_probe():
    async with ms.peer_agent_server() as srv, peer_source(srv.url) as source:
        result = await source.probe()
    assert (result.source, result.ok) == ("helper", True)


# --- SSE transport ----------------------------------------------------------------------------


async def test_sse_transport_lists_calls_and_forwards_bearers():
    tokens = bearers(10)
    async with (
        ms.header_echo_server(transport="sse") as srv,
        server_source(srv.url, transport="sse", forward_inbound_auth=True) as source,
    ):
        assert [t.name for t in await source.list_tools()] == ["echo_headers"]
        results = await asyncio.gather(
            *(source.call_tool("echo_headers", {}, Onward(credential=t)) for t in [*tokens, None])
        )
        probe = await source.probe()
    for token, outcome in zip([*tokens, None], results, strict=True):
        assert echoed(outcome)["authorization"] == token
    assert (probe.ok, probe.message) == (True, "")


async def test_sse_transport_relays_progress():
    got = []

    async def on_progress(progress, total, message):
        got.append(progress)

    async with ms.progress_server(transport="sse") as srv, server_source(srv.url, transport="sse") as source:
        outcome = await source.call_tool("work", {}, Onward(on_progress=on_progress))
    assert outcome.content == (TextPart("worked"),)
    assert got == [1, 2, 3]


async def test_sse_probe_of_a_streamable_http_endpoint_fails():
    async with ms.header_echo_server() as srv, server_source(srv.url, transport="sse") as source:
        result = await source.probe()
    assert not result.ok
    assert result.message.startswith(("HTTP 4", "not an MCP SSE endpoint"))


# --- server-everything (the reference TypeScript server) --------------------------------------


async def test_server_everything_tools_echo_and_probe(everything):
    async with server_source(everything.url, name="everything", forward_inbound_auth=True) as source:
        names = {t.name for t in await source.list_tools()}
        assert {"echo", "get-sum", "trigger-long-running-operation"} <= names
        for inbound in (None, "Bearer ignored-by-everything"):
            outcome = await source.call_tool("echo", {"message": "hello"}, Onward(credential=inbound))
            assert outcome.content == (TextPart("Echo: hello"),)
        image = await source.call_tool("get-tiny-image", {}, Onward())
        assert any(isinstance(p, ImagePart) and p.mime_type == "image/png" for p in image.content)
        unknown = await source.call_tool("no-such-tool", {}, Onward())
        assert unknown.is_error
        result = await source.probe()
    assert (result.source, result.ok, result.message) == ("everything", True, "")


async def test_server_everything_progress(everything):
    got = []

    async def on_progress(progress, total, message):
        got.append((progress, total))

    async with server_source(everything.url) as source:
        outcome = await source.call_tool(
            "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, Onward(on_progress=on_progress)
        )
    (part,) = outcome.content
    assert part.text.startswith("Long running operation completed.")
    assert got == [(1, 3), (2, 3), (3, 3)]


# --- the agent's sources (agent.live.default_parts) ------------------------------------------


def test_build_sources_keeps_config_order_and_kinds():
    config = AgentConfig.model_validate(
        {
            "name": "planner",
            "model": "m",
            "provider": {"name": "p", "type": "openai"},
            "servers": [
                {"name": "weather", "url": "http://127.0.0.1:1/mcp"},
                {
                    "name": "files",
                    "url": "http://127.0.0.1:2/sse",
                    "transport": "sse",
                    "headers": [{"name": "X-Api-Key", "valueFromEnv": "FILES_KEY"}],
                },
            ],
            "agents": [{"name": "researcher", "url": "http://127.0.0.1:3/mcp"}],
            "health": {"probeTimeoutSeconds": 1.5},
        }
    )
    sources = [part.build() for part in default_parts(config, {"FILES_KEY": "k"}).sources]
    assert [s.name for s in sources] == ["weather", "files", "researcher"]
    assert [type(s) for s in sources] == [McpServerSource, McpServerSource, PeerAgentSource]
    assert all(isinstance(s, RemoteMcpSource) for s in sources)
    assert not sources[0].forwards_inbound_auth
    assert sources[2].forwards_inbound_auth
