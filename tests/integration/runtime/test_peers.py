"""A real agent against real MCP peers we did not write: the official Python SDK client, fastmcp's
Client in both protocol eras, the MCP Inspector CLI, the MCP conformance suite, and the
`pallas agent` program itself.

One agent serves the whole module (`serve_agent`, in the module's event loop): a FakeOpenAI
provider whose default reply is `you said: <last user text>`, and one downstream fastmcp server
`tools` whose tool `work` reports progress 1/3, 2/3, 3/3.

Conformance suite 0.1.16, server scenarios as `conformance list --server` names them (a test
fails when a new suite version adds a scenario this module has not classified). Each scenario
in `CONFORMANCE_RAN` runs once against the agent and must end with no FAILURE and no WARNING:

- server-initialize, ping: the handshake and the keep-alive every server must answer.
- tools-list, prompts-list: listings with a valid structure (our two tools, our history prompt).
- resources-list: the agent advertises the `resources` capability (fastmcp always does), so
  `resources/list` must answer validly; it lists the agent's one resource, `pallas://instruction`.
- logging-set-level: the agent advertises `logging` (fastmcp's default), so `logging/setLevel`
  must be accepted.
- server-sse-multiple-streams: several concurrent POST SSE streams on one session (transport).
- dns-rebinding-protection: a request with `Host`/`Origin: evil.example.com` to the agent bound
  on 127.0.0.1 must get a 4xx; a localhost Host must get 200.

Excluded (`CONFORMANCE_EXCLUDED`), because they need fixtures of the suite's reference
"everything" test server that an agent does not and should not have:

- tools-call-*, json-schema-2020-12, elicitation-sep1034-defaults, elicitation-sep1330-enums:
  they call tools named `test_*` (image, audio, embedded resource, logging, progress, sampling,
  elicitation, a hand-written 2020-12 schema). An agent has exactly send_message and get_health
  and never samples or elicits. tools-call-simple-text and tools-call-error even *pass* against
  it, falsely: fastmcp's "Unknown tool" answer is an isError text block, which is all those two
  checks look at. Our own progress and error behaviour is covered by the SDK tests below.
- completion-complete: needs the fixture prompt `test_prompt_with_arguments` and the
  `completions` capability; the agent offers no completions.
- resources-read-text, resources-read-binary, resources-templates-read: fixture resources
  (`test://...`); the agent has only its instruction.
- resources-subscribe, resources-unsubscribe: fixture resource `test://watched-resource`, and
  fastmcp 4.1.2 has no subscribe handler at all (it advertises `subscribe: false`).
- prompts-get-simple, -with-args, -embedded-resource, -with-image: fixture prompts `test_*`;
  our `<agent>_history` prompt is checked with three real clients below.
- server-sse-polling (pending suite): needs the fixture tool `test_reconnection`, which closes
  the POST stream mid-call; the agent serves without an event store, so it does not resume
  streams (the suite then only warns: no priming event, no `retry:` field).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import httpx2
import jsonschema
import pytest
import pytest_asyncio
from fastmcp import Client
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client

from tests.support.agents import (
    QUIET_FASTMCP_ENV,
    ServedAgent,
    agent_config,
    pallas_argv,
    run_agent_process,
    serve_agent,
)
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_peers import McpPeers
from tests.support.mcp_peers import run_node as _node
from tests.support.mcp_servers import RunningServer, progress_server

pytestmark = pytest.mark.asyncio(loop_scope="module")

AGENT = "peer-test"
HISTORY_PROMPT = f"{AGENT}_history"

CONFORMANCE_RAN = (
    "server-initialize",
    "ping",
    "tools-list",
    "prompts-list",
    "resources-list",
    "logging-set-level",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
)
_FIXTURE_TOOLS = "needs the suite's fixture tools (test_*); an agent has only send_message and get_health"
CONFORMANCE_EXCLUDED = {
    "completion-complete": "needs fixture prompt test_prompt_with_arguments and the completions capability",
    "tools-call-simple-text": _FIXTURE_TOOLS + " (passes falsely on fastmcp's 'Unknown tool' error)",
    "tools-call-image": _FIXTURE_TOOLS,
    "tools-call-audio": _FIXTURE_TOOLS,
    "tools-call-embedded-resource": _FIXTURE_TOOLS,
    "tools-call-mixed-content": _FIXTURE_TOOLS,
    "tools-call-with-logging": _FIXTURE_TOOLS,
    "tools-call-error": _FIXTURE_TOOLS + " (passes falsely on fastmcp's 'Unknown tool' error)",
    "tools-call-with-progress": _FIXTURE_TOOLS + "; our progress is checked by the SDK test",
    "tools-call-sampling": _FIXTURE_TOOLS + "; the agent never samples",
    "tools-call-elicitation": _FIXTURE_TOOLS + "; the agent never elicits",
    "json-schema-2020-12": _FIXTURE_TOOLS,
    "elicitation-sep1034-defaults": _FIXTURE_TOOLS + "; the agent never elicits",
    "elicitation-sep1330-enums": _FIXTURE_TOOLS + "; the agent never elicits",
    "server-sse-polling": "needs fixture tool test_reconnection; the agent has no event store to resume from",
    "resources-read-text": "fixture resource test://static-text; the agent has only pallas://instruction",
    "resources-read-binary": "fixture resource test://static-binary; the agent has only pallas://instruction",
    "resources-templates-read": "fixture template test://template/{id}/data; the agent has no templates",
    "resources-subscribe": "fixture resource; fastmcp 4.1.2 has no resources/subscribe handler",
    "resources-unsubscribe": "fixture resource; fastmcp 4.1.2 has no resources/unsubscribe handler",
    "prompts-get-simple": "fixture prompt test_simple_prompt; our prompt is checked by three clients",
    "prompts-get-with-args": "fixture prompt test_prompt_with_arguments",
    "prompts-get-embedded-resource": "fixture prompt test_prompt_with_embedded_resource",
    "prompts-get-with-image": "fixture prompt test_prompt_with_image",
}

STEP = re.compile(rf"^{re.escape(AGENT)} step (\d+) \((llm|tool)\)$")
TOOL_STATE = re.compile(r"^tools/work: (started|completed|failed)$")
RELAYED = re.compile(r"^tools/work: step [123]$")
TEXT = f"{AGENT} text: "
"""The model's text as it streams (docs/api.md §3): pieces that join into the answer."""


# --- fixtures -----------------------------------------------------------------------------------


def _last_user_text(request_json: dict[str, Any]) -> str:
    user = [m for m in request_json["messages"] if m["role"] == "user"][-1]
    content = user["content"]
    if isinstance(content, str):
        return content
    return " ".join(part["text"] for part in content if part.get("type") == "text")


def _echo_reply(request_json: dict[str, Any]) -> Text:
    return Text(f"you said: {_last_user_text(request_json)}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(default=_echo_reply) as fake:
        yield fake


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def downstream() -> AsyncIterator[RunningServer]:
    async with progress_server() as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def agent(llm: FakeOpenAI, downstream: RunningServer) -> AsyncIterator[ServedAgent]:
    config = agent_config(llm.base_url, name=AGENT, servers=[{"name": "tools", "url": downstream.url}])
    async with serve_agent(config) as served:
        yield served


@contextlib.asynccontextmanager
async def sdk_session(url: str) -> AsyncIterator[ClientSession]:
    """The official SDK's own client: ClientSession over streamable_http_client (handshake era)."""
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, read_timeout_seconds=30) as session,
    ):
        yield session


def _text(result: Any) -> str:
    assert not result.is_error, result
    assert len(result.content) == 1, result.content
    assert result.content[0].type == "text"
    return str(result.content[0].text)


def _roles_and_texts(prompt: Any) -> list[tuple[str, str]]:
    return [(m.role, m.content.text) for m in prompt.messages]


# --- a. the official Python SDK -----------------------------------------------------------------


async def test_sdk_handshake_lists_exactly_the_agent_surface(agent: ServedAgent):
    async with sdk_session(agent.url) as session:
        init = await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        prompts = (await session.list_prompts()).prompts

    assert init.server_info.name == AGENT
    assert init.protocol_version == "2025-11-25"
    conversation_tools = {"create_conversation", "list_conversations", "delete_conversation"}
    assert set(tools) == {"send_message", AGENT, "get_health", *conversation_tools}
    # The alias the seeds' client snippets call: send_message under the agent's name.
    assert tools[AGENT].input_schema == tools["send_message"].input_schema
    assert tools[AGENT].description == tools["send_message"].description

    # docs/api.md §3: send_message(message: str, images?: [{data, mime_type}], conversation_id?: str,
    # params?: RequestParams)
    schema = tools["send_message"].input_schema
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"message", "images", "conversation_id", "params"}
    params = next(s for s in schema["properties"]["params"]["anyOf"] if s.get("type") == "object")
    assert {"temperature", "maxTokens", "toolChoice", "responseFormat", "extra"} <= set(params["properties"])
    assert schema["required"] == ["message"]
    valid = [
        {"message": "hi"},
        {"message": "hi", "images": [{"data": "iVBORw0=", "mime_type": "image/png"}], "conversation_id": "c"},
    ]
    invalid = [
        {},
        {"message": 1},
        {"message": "hi", "images": [{"data": "iVBORw0="}]},
        {"message": "hi", "images": [{"data": "x", "mime_type": "image/png", "url": "u"}]},
        {"message": "hi", "conversation_id": 7},
        {"message": "hi", "bogus": True},
    ]
    for arguments in valid:
        jsonschema.validate(arguments, schema)
    for arguments in invalid:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(arguments, schema)

    health_schema = tools["get_health"].input_schema
    assert health_schema["type"] == "object"
    assert list(health_schema.get("properties", {})) == ["diagnostics"]  # optional, off by default
    assert health_schema["properties"]["diagnostics"]["default"] is False
    assert not health_schema.get("required")

    assert [p.name for p in prompts] == [HISTORY_PROMPT]
    assert [(a.name, a.required) for a in prompts[0].arguments or []] == [("conversation_id", False)]


async def test_sdk_send_message_streams_progress_in_the_seed_formats(agent: ServedAgent, llm: FakeOpenAI):
    llm.script(ToolCalls([Call("tools__work", "{}")]), Text("worked it out"))
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    async with sdk_session(agent.url) as session:
        await session.initialize()
        # A progress callback makes the SDK send `_meta.progressToken` with the request.
        result = await session.call_tool(
            "send_message", {"message": "do the work"}, progress_callback=on_progress
        )

    assert _text(result) == "worked it out"
    streamed = [m for _, _, m in updates if m and m.startswith(TEXT)]
    assert "".join(m.removeprefix(TEXT) for m in streamed) == "worked it out"
    messages = [m for _, _, m in updates if m not in streamed]
    for message in messages:
        assert message is not None
        assert STEP.match(message) or TOOL_STATE.match(message) or RELAYED.match(message), message
    assert messages == [
        f"{AGENT} step 1 (llm)",
        f"{AGENT} step 2 (tool)",
        "tools/work: started",
        "tools/work: step 1",
        "tools/work: step 2",
        "tools/work: step 3",
        "tools/work: completed",
        f"{AGENT} step 3 (llm)",
    ]
    # MCP: a token's progress increases with every notification (the formats are in the messages).
    assert [p for p, _, _ in updates] == list(range(1, len(updates) + 1))
    assert {t for _, t, _ in updates} == {None}


async def test_sdk_get_health_returns_its_json_document(agent: ServedAgent):
    async with sdk_session(agent.url) as session:
        await session.initialize()
        result = await session.call_tool("get_health", {})

    report = json.loads(_text(result))
    assert report["status"] == "ok", report
    assert set(report) == {"status", "timestamp", "configHash"}
    assert datetime.fromisoformat(report["timestamp"]).tzinfo is not None


# --- b. fastmcp's Client, both protocol eras ----------------------------------------------------


async def test_fastmcp_legacy_history_is_keyed_by_the_mcp_session(agent: ServedAgent, llm: FakeOpenAI):
    async with Client(agent.url, mode="legacy", timeout=30) as client:
        assert client.initialize_result is not None
        assert client.initialize_result.protocol_version == "2025-11-25"
        assert _text(await client.call_tool_mcp("send_message", {"message": "first"})) == "you said: first"
        assert _text(await client.call_tool_mcp("send_message", {"message": "second"})) == "you said: second"
        prompt = await client.get_prompt(HISTORY_PROMPT)
    assert _roles_and_texts(prompt) == [
        ("user", "first"),
        ("assistant", "you said: first"),
        ("user", "second"),
        ("assistant", "you said: second"),
    ]
    # The second turn reached the model with the first one as context.
    sent = [(m["role"], m["content"]) for m in llm.completions[-1].json["messages"]]
    assert sent[-3:] == [("user", "first"), ("assistant", "you said: first"), ("user", "second")]

    async with Client(agent.url, mode="legacy", timeout=30) as other_session:
        with pytest.raises(MCPError, match="no stored conversation for this MCP session"):
            await other_session.get_prompt(HISTORY_PROMPT)


async def test_fastmcp_modern_sessionless_needs_a_conversation_id(agent: ServedAgent):
    async with Client(agent.url, timeout=30) as client:
        assert client.protocol_version == "2026-07-28"
        assert _text(await client.call_tool_mcp("send_message", {"message": "hello"})) == "you said: hello"
        # Sessionless: nothing names a conversation, so nothing was kept.
        with pytest.raises(MCPError, match="no conversation"):
            await client.get_prompt(HISTORY_PROMPT)

        for message in ("one", "two"):
            result = await client.call_tool_mcp(
                "send_message", {"message": message, "conversation_id": "modern-1"}
            )
            assert _text(result) == f"you said: {message}"
        prompt = await client.get_prompt(HISTORY_PROMPT, {"conversation_id": "modern-1"})
    assert _roles_and_texts(prompt) == [
        ("user", "one"),
        ("assistant", "you said: one"),
        ("user", "two"),
        ("assistant", "you said: two"),
    ]


# --- c. the MCP Inspector CLI -------------------------------------------------------------------


async def _inspector(peers: McpPeers, url: str, *args: str) -> Any:
    rc, out, err = await _node(
        peers,
        str(peers.inspector_cli),
        *("--cli", url, "--transport", "http"),
        *args,
        cwd=peers.inspector_cli_cwd,
    )
    assert rc == 0, f"inspector {args}: rc={rc}\n{err}"
    return json.loads(out)


async def test_inspector_cli_lists_and_calls(agent: ServedAgent, mcp_peers: McpPeers):
    tools, health, answer, prompts = await asyncio.gather(
        _inspector(mcp_peers, agent.url, "--method", "tools/list"),
        _inspector(mcp_peers, agent.url, "--method", "tools/call", "--tool-name", "get_health"),
        _inspector(
            mcp_peers,
            agent.url,
            "--method",
            "tools/call",
            "--tool-name",
            "send_message",
            "--tool-arg",
            "message=hi",
        ),
        _inspector(mcp_peers, agent.url, "--method", "prompts/list"),
    )

    assert sorted(t["name"] for t in tools["tools"]) == [
        "create_conversation",
        "delete_conversation",
        "get_health",
        "list_conversations",
        AGENT,
        "send_message",
    ]
    by_name = {t["name"]: t for t in tools["tools"]}
    assert by_name["send_message"]["inputSchema"]["required"] == ["message"]
    assert by_name["get_health"]["annotations"] == {"readOnlyHint": True, "idempotentHint": True}

    assert health["isError"] is False
    assert json.loads(health["content"][0]["text"])["status"] == "ok"

    # Kept under the session (the Inspector holds one), and the result names the conversation.
    assert answer["content"] == [{"type": "text", "text": "you said: hi"}]
    assert answer["isError"] is False
    assert answer["_meta"]["pallas.dev/conversationId"].startswith("session-")

    assert [p["name"] for p in prompts["prompts"]] == [HISTORY_PROMPT]


# --- d. the MCP conformance suite ---------------------------------------------------------------


async def test_conformance_lists_exactly_the_scenarios_we_classified(mcp_peers: McpPeers, tmp_path):
    rc, out, err = await _node(mcp_peers, str(mcp_peers.conformance), "list", "--server", cwd=tmp_path)
    assert rc == 0, err
    listed = re.findall(r"^\s+- (\S+)", out, re.MULTILINE)
    assert listed, out
    assert not set(CONFORMANCE_RAN) & set(CONFORMANCE_EXCLUDED)
    assert sorted(listed) == sorted([*CONFORMANCE_RAN, *CONFORMANCE_EXCLUDED])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def conformance_results(agent: ServedAgent, mcp_peers: McpPeers, tmp_path_factory) -> dict[str, Any]:
    """Run every scenario of CONFORMANCE_RAN once against the agent (a few at a time)."""
    out_root = tmp_path_factory.mktemp("conformance")
    gate = asyncio.Semaphore(4)

    async def run(scenario: str) -> tuple[str, dict[str, Any]]:
        out_dir = out_root / scenario
        async with gate:
            rc, out, err = await _node(
                mcp_peers,
                str(mcp_peers.conformance),
                *("server", "--url", agent.url, "--scenario", scenario, "-o", str(out_dir)),
                cwd=out_root,
            )
        files = sorted(out_dir.glob("*/checks.json"))
        checks = json.loads(files[0].read_text()) if files else []
        return scenario, {"rc": rc, "checks": checks, "output": out + err}

    return dict(await asyncio.gather(*(run(s) for s in CONFORMANCE_RAN)))


@pytest.mark.parametrize("scenario", CONFORMANCE_RAN)
async def test_conformance_server_scenario(scenario: str, conformance_results: dict[str, Any]):
    result = conformance_results[scenario]
    summary = [
        f"{c['status']} {c['id']}: {c.get('errorMessage') or c.get('description', '')} {c.get('details', '')}"
        for c in result["checks"]
    ]
    statuses = [c["status"] for c in result["checks"]]
    assert "SUCCESS" in statuses, result["output"]
    assert not {"FAILURE", "WARNING"} & set(statuses), "\n".join(summary)
    assert result["rc"] == 0, result["output"]


# --- e. `pallas agent` as a process -------------------------------------------------------------


async def test_pallas_agent_becomes_ready_and_serves(llm: FakeOpenAI):
    config = agent_config(llm.base_url, name="cli-agent")
    async with run_agent_process(config) as proc:
        # How fast is measured by bench/agent_bench.py on a quiet machine; a test only bounds it
        # loosely, as CI machines are shared.
        assert proc.started_in < 20.0, f"/readyz answered 200 only {proc.started_in:.2f}s after spawn"
        async with Client(proc.url, timeout=30) as client:
            report = json.loads(_text(await client.call_tool_mcp("get_health", {})))
        assert report["status"] == "ok", report
        async with httpx2.AsyncClient() as http:
            assert (await http.get(proc.base_url + "/healthz")).status_code == 200


async def _run_pallas(*args: str, time_limit: float = 30) -> tuple[int, str, float]:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *pallas_argv(),
        *args,
        env={**os.environ, **QUIET_FASTMCP_ENV},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), time_limit)
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, (out + err).decode(), time.monotonic() - started


def _plain_lines(output: str) -> list[str]:
    """Lines that are not the agent's JSON log records: what a person is meant to read."""
    lines = []
    for line in output.splitlines():
        with contextlib.suppress(ValueError):
            if isinstance(json.loads(line), dict):
                continue
        if line.strip():
            lines.append(line)
    return lines


async def test_pallas_agent_port_in_use_fails_with_one_line(llm: FakeOpenAI, tmp_path):
    config_path = tmp_path / "agent.yaml"
    config_path.write_text(
        f"name: busy\nmodel: fake-model\nprovider: {{name: fake, type: openai, baseURL: '{llm.base_url}'}}\n"
    )
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        rc, output, _ = await _run_pallas(
            "agent", "--config", str(config_path), "--port", str(port), "--host", "127.0.0.1"
        )
    assert rc != 0, output
    plain = _plain_lines(output)
    assert len(plain) == 1, f"expected one line naming the port, got:\n{output}"
    assert plain[0].startswith("pallas agent: "), plain
    assert f"127.0.0.1:{port}" in plain[0], plain


async def test_pallas_agent_bad_config_exits_2_naming_file_and_field(tmp_path):
    config_path = tmp_path / "broken.yaml"
    config_path.write_text("name: broken\nmodel: fake-model\nprovider: {name: fake, type: gpt}\n")
    rc, output, _ = await _run_pallas("agent", "--config", str(config_path), "--port", "0")
    assert rc == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith(f"pallas agent: {config_path}: "), lines
    assert "provider.type" in lines[0], lines
