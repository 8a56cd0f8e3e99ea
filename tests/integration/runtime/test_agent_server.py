"""An agent served over real HTTP, thinking with scripted fake LLMs (real OpenAI/Anthropic wire
formats through the official SDKs) and acting through real downstream MCP servers and peer agents.

What needs no network (the tools' schemas and descriptions, argument errors and their codes, the
alias, the conversation tools, the instruction resource) is driven in memory in tests/unit/server.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_api import names
from pallas_api.config import AgentConfig, parse_config
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_operator.builders import AgentWorkload, Owner
from pallas_operator.builders.agent import allowed_host_args
from pallas_runtime.conversations.caller import ANONYMOUS
from pallas_runtime.conversations.factory import build_store
from pallas_runtime.conversations.model import ConversationKey, ConversationStore
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server import agent_app, build_server
from pallas_runtime.server.warm_up import KEY_VALUE_TYPE_CHECKS, LAZY_FASTMCP_IMPORTS
from tests.support.conversations import turns_on, until
from tests.support.fake_llm import Call, Delay, FakeAnthropic, FakeOpenAI, Hold, HttpError, Text, ToolCalls
from tests.support.mcp_servers import (
    RunningServer,
    bearer_echo_server,
    header_echo_server,
    serve_app,
    silent_server,
)
from tests.support.operator import agent as operator_agent
from tests.support.operator import at, deployment

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()


def config(llm: FakeOpenAI | FakeAnthropic, name: str = "harper", **extra: Any) -> AgentConfig:
    provider_type = "anthropic" if isinstance(llm, FakeAnthropic) else "openai"
    return parse_config(
        {
            "name": name,
            "model": llm.models[0],
            "instruction": "You help.",
            "provider": {
                "name": "llm",
                "type": provider_type,
                "baseURL": llm.base_url,
                "maxRetries": 1,
                "timeoutSeconds": 5,
            },
            **extra,
        }
    )


@contextlib.asynccontextmanager
async def agent(
    cfg: AgentConfig, metrics: RuntimeMetrics | None = None, store: ConversationStore | None = None
) -> AsyncIterator[RunningServer]:
    async with serve_app(agent_app(build_server(cfg, metrics=metrics, environ={}, store=store))) as running:
        yield running


def client(url: str, bearer: str | None = None, mode: str = "legacy") -> Client:
    headers = {"Authorization": bearer} if bearer else None
    return Client(StreamableHttpTransport(url, headers=headers), mode=mode, timeout=30)  # type: ignore[arg-type]


async def send(url: str, arguments: dict[str, Any], **kwargs: Any) -> Any:
    async with client(url, **kwargs) as c:
        return await c.call_tool_mcp("send_message", arguments)


def last_tool_text(request_json: dict[str, Any]) -> str | None:
    """The content of the newest tool result in an OpenAI request, if the last message is one."""
    message = request_json["messages"][-1]
    return str(message["content"]) if message["role"] == "tool" else None


async def test_openai_tool_call_through_a_downstream_server(fake_openai: FakeOpenAI) -> None:
    async with header_echo_server() as echo:
        cfg = config(fake_openai, servers=[{"name": "echo", "url": echo.url, "forwardInboundAuth": True}])
        fake_openai.script(ToolCalls([Call("echo__echo_headers", "{}")]), Text("All done."))
        async with agent(cfg) as running:
            result = await send(running.url, {"message": "who am i?"}, bearer="Bearer alice")
    assert (result.is_error, result.content[0].text) == (False, "All done.")
    first, second = fake_openai.completions
    assert first.json["messages"][0] == {"role": "system", "content": "You help."}
    assert [t["function"]["name"] for t in first.json["tools"]] == ["echo__echo_headers"]
    # The server got the caller's bearer and echoed it: the model reads it scrubbed.
    assert json.loads(second.json["messages"][-1]["content"])["authorization"] == "[redacted]"


async def test_anthropic_tool_use_and_images(fake_anthropic: FakeAnthropic) -> None:
    async with header_echo_server() as echo:
        cfg = config(
            fake_anthropic, servers=[{"name": "echo", "url": echo.url}], capabilities={"vision": True}
        )
        fake_anthropic.script(ToolCalls([Call("echo__echo_headers", {"delay": 0})]), Text("Seen."))
        async with agent(cfg) as running:
            result = await send(
                running.url, {"message": "look", "images": [{"data": PNG, "mime_type": "image/png"}]}
            )
    assert result.content[0].text == "Seen."
    first, second = fake_anthropic.completions
    user_blocks = first.json["messages"][0]["content"]
    assert user_blocks[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
    }
    assert second.json["messages"][-1]["content"][0]["type"] == "tool_result"


async def test_concurrent_bearers_never_leak_between_requests(fake_openai: FakeOpenAI) -> None:
    """The original's worst incident: a bearer from one request reaching another's downstream call."""

    def step(request_json: dict[str, Any]) -> Any:
        tool_text = last_tool_text(request_json)
        if tool_text is None:
            return ToolCalls(
                [Call("fwd__echo_headers", {"delay": 0.05}), Call("plain__echo_headers", {"delay": 0})]
            )
        # Answer with both tool results, in order, so the test sees what each server received.
        results = [m["content"] for m in request_json["messages"] if m["role"] == "tool"]
        return Text(json.dumps([json.loads(r)["authorization"] for r in results]))

    fake_openai.default = step
    async with header_echo_server() as fwd, header_echo_server() as plain:
        cfg = config(
            fake_openai,
            servers=[
                {"name": "fwd", "url": fwd.url, "forwardInboundAuth": True},
                {"name": "plain", "url": plain.url},
            ],
        )
        async with agent(cfg) as running:
            bearers = [f"Bearer user-{i}" for i in range(24)]
            results = await asyncio.gather(*(send(running.url, {"message": "hi"}, bearer=b) for b in bearers))
    # Each turn scrubs its own caller's bearer from what the tools echo, and only that one: a
    # bearer of another request reaching this turn's server would show in the clear.
    for result in results:
        assert json.loads(result.content[0].text) == ["[redacted]", None]
    seen = {r.headers.get("authorization") for r in fwd.received("POST")} - {None}
    assert seen == set(bearers)


async def test_progress_only_with_a_token_and_relayed_from_a_sub_agent(fake_openai: FakeOpenAI) -> None:
    def step(request_json: dict[str, Any]) -> Any:
        system = request_json["messages"][0]["content"]
        if last_tool_text(request_json) is not None:
            return Text("final")
        if system == "boss":
            return ToolCalls([Call("worker__send_message", {"message": "do it"})])
        return ToolCalls([Call("echo__echo_headers", {"delay": 0})])

    fake_openai.default = step
    async with header_echo_server() as echo:
        worker_cfg = config(fake_openai, "worker", servers=[{"name": "echo", "url": echo.url}])
        async with agent(worker_cfg) as worker:
            boss_cfg = config(fake_openai, "boss", agents=[{"name": "worker", "url": worker.url}])
            boss_cfg = boss_cfg.model_copy(update={"instruction": "boss"})
            async with agent(boss_cfg) as boss:
                seen: list[tuple[float, float | None, str | None]] = []

                async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                    seen.append((progress, total, message))

                async with client(boss.url) as c:
                    await c.call_tool("send_message", {"message": "go"}, progress_handler=on_progress)
                    silent = await c.call_tool_mcp("send_message", {"message": "again"})
    messages = [m for _, _, m in seen]
    assert messages[:3] == ["boss step 1 (llm)", "boss step 2 (tool)", "worker/send_message: started"]
    assert "worker/send_message: worker step 1 (llm)" in messages
    assert "worker/send_message: echo/echo_headers: completed" in messages
    # The boss's final text streams to its caller, after its last step.
    assert messages[-3:] == ["worker/send_message: completed", "boss step 3 (llm)", "boss text: final"]
    # One counter per call, as MCP requires of a token's progress: rising, with no total.
    numbers = [p for p, _, _ in seen]
    assert numbers == sorted(set(numbers))
    assert {t for _, t, _ in seen} == {None}
    assert not silent.is_error
    assert len(seen) == len(messages)  # the second call (no token) added nothing


async def test_history_prompt_by_session_and_by_conversation_id(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Text("first answer"), Text("second answer"), Text("by id"))
    cfg = config(fake_openai, capabilities={"vision": True})
    async with agent(cfg) as running, client(running.url) as c:
        await c.call_tool(
            "send_message", {"message": "one", "images": [{"data": PNG, "mime_type": "image/png"}]}
        )
        await c.call_tool("send_message", {"message": "two"})
        history = await c.get_prompt("harper_history")
        await c.call_tool("send_message", {"message": "three", "conversation_id": "c-1"})
        by_id = await c.get_prompt("harper_history", {"conversation_id": "c-1"})
        with pytest.raises(Exception, match="no stored conversation for conversation_id 'nope'"):
            await c.get_prompt("harper_history", {"conversation_id": "nope"})
    roles = [(m.role, getattr(m.content, "text", None) or m.content.type) for m in history.messages]
    assert roles == [
        ("user", "one"),
        ("user", "image"),
        ("assistant", "first answer"),
        ("user", "two"),
        ("assistant", "second answer"),
    ]
    # The second turn was sent with the first one as history.
    assert [m["role"] for m in fake_openai.completions[1].json["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]
    assert [m.content.text for m in by_id.messages] == ["three", "by id"]


async def test_turns_on_one_conversation_are_serialized(fake_openai: FakeOpenAI) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release, Text("slow first")), Text("second"))
    cfg = config(fake_openai)
    store = build_store(cfg, {})
    async with agent(cfg, store=store) as running:
        first = asyncio.create_task(send(running.url, {"message": "a", "conversation_id": "x"}))
        await asyncio.wait_for(fake_openai.held.wait(), 30)  # a's turn is at the model
        second = asyncio.create_task(send(running.url, {"message": "b", "conversation_id": "x"}))
        conversation = ConversationKey(cfg.identity, ANONYMOUS, "x")
        await until(lambda: turns_on(store, conversation) == 2, "b's turn waiting behind a's")
        release.set()
        assert (await first).content[0].text == "slow first"
        assert (await second).content[0].text == "second"
    # b was sent to the model only after a's turn was stored.
    assert [m["content"] for m in fake_openai.completions[1].json["messages"][1:]] == ["a", "slow first", "b"]


@pytest.mark.parametrize(
    ("step", "error"),
    [
        (
            HttpError(400, "bad request: unknown model"),
            "the language model call failed: openai provider 'llm': HTTP 400",
        ),
        (HttpError(503, "overloaded"), "HTTP 503"),
        (Delay(1.5, Text("too late")), "timed out"),
    ],
)
async def test_llm_failures_end_the_call_with_a_clear_error(
    fake_openai: FakeOpenAI, step: Any, error: str
) -> None:
    fake_openai.script(step, step)  # one retry (maxRetries: 1) for 5xx and timeouts
    cfg = config(fake_openai)
    cfg = cfg.model_copy(update={"provider": cfg.provider.model_copy(update={"timeout_seconds": 0.5})})
    async with agent(cfg) as running:
        result = await send(running.url, {"message": "hi"})
        assert result.is_error
        assert error in result.content[0].text
        assert result.structured_content["error"]["code"] == "LLM_ERROR"
        fake_openai.reset()
        fake_openai.script(Text("recovered"))
        assert (await send(running.url, {"message": "again"})).content[0].text == "recovered"


async def test_downstream_down_or_slow_and_bad_tool_calls_go_back_to_the_model(
    fake_openai: FakeOpenAI,
) -> None:
    async with silent_server() as slow, header_echo_server() as echo:
        cfg = config(
            fake_openai,
            servers=[
                {"name": "slow", "url": slow.url, "timeoutSeconds": 0.5},
                {"name": "gone", "url": "http://127.0.0.1:9/mcp", "timeoutSeconds": 2},
                {"name": "echo", "url": echo.url},
            ],
            tools={"deny": ["echo__*"]},
        )
        fake_openai.script(
            ToolCalls([Call("gone__anything"), Call("echo__echo_headers"), Call("echo__nope", "{not json")]),
            Text("coped"),
        )
        async with agent(cfg) as running:
            result = await send(running.url, {"message": "try"})
    assert result.content[0].text == "coped"
    tool_messages = [m["content"] for m in fake_openai.completions[1].json["messages"] if m["role"] == "tool"]
    assert "unknown tool 'gone__anything'" in tool_messages[0]
    assert tool_messages[1] == "Error: tool 'echo__echo_headers' is not allowed for this agent"
    assert "unknown tool 'echo__nope'" in tool_messages[2]
    assert fake_openai.completions[0].json.get("tools") is None  # nothing listable and allowed


async def test_probe_routes_and_health(fake_openai: FakeOpenAI) -> None:
    async with silent_server() as silent:
        cfg = config(
            fake_openai, servers=[{"name": "silent", "url": silent.url}], health={"probeTimeoutSeconds": 0.5}
        )
        async with agent(cfg) as running:
            base = running.url.removesuffix("/mcp")
            async with httpx2.AsyncClient() as http:
                assert (await http.get(f"{base}/healthz")).json()["status"] == "alive"
                assert (await http.get(f"{base}/readyz")).status_code == 200
                async with client(running.url) as c:
                    health = json.loads((await c.call_tool("get_health", {})).content[0].text)
                scrape = (await http.get(f"{base}/metrics")).text
    assert health["status"] == "degraded"
    assert health["message"].startswith("Unreachable: silent (timed out")
    assert 'pallas_downstream_up{agent="harper",server="silent"} 0.0' in scrape
    assert 'pallas_agent_health_status{agent="harper"} 0.5' in scrape
    assert fake_openai.completions == []  # get_health never calls the LLM


async def test_a_server_that_wants_the_callers_bearer_is_up_with_a_note_not_degraded(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(ToolCalls([Call("vault__echo_headers", {"delay": 0})]), Text("done"))
    async with bearer_echo_server() as vault:
        forwarding = config(
            fake_openai,
            servers=[{"name": "vault", "url": vault.url, "forwardInboundAuth": True,
                      "headers": [{"name": "X-Api-Key", "value": "k1"}]}],
        )  # fmt: skip
        not_forwarding = config(fake_openai, "blind", servers=[{"name": "vault", "url": vault.url}])
        async with agent(forwarding) as running, agent(not_forwarding) as blind:
            async with client(running.url) as c:
                health = json.loads((await c.call_tool("get_health", {})).content[0].text)
            async with client(blind.url) as c:
                blind_health = json.loads((await c.call_tool("get_health", {})).content[0].text)
            answer = await send(running.url, {"message": "go"}, bearer="Bearer caller-token")
    assert health["status"] == "ok"
    assert health["message"] == "Needs caller credentials: vault"
    # Without forwarding nothing could ever get in: that is a real problem.
    assert blind_health["status"] == "degraded"
    assert blind_health["message"].startswith("Unreachable: vault (HTTP 401")
    # The probe carried the configured headers; the caller's bearer reached the server on the call.
    posts = [r.headers for r in vault.received("POST")]
    assert any(h.get("x-api-key") == "k1" and "authorization" not in h for h in posts)
    assert any(h.get("authorization") == "Bearer caller-token" for h in posts)
    assert not answer.is_error
    tool_text = last_tool_text(fake_openai.completions[1].json)
    assert tool_text is not None
    assert json.loads(tool_text)["authorization"] == "[redacted]"  # echoed, then scrubbed


async def test_peer_tools_say_what_the_peer_is_for(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Text("ok"))
    worker_cfg = config(
        fake_openai, "worker", title="Paper Finder", description="Finds and summarises papers."
    )
    async with (
        agent(worker_cfg) as worker,
        agent(config(fake_openai, "boss", agents=[{"name": "worker", "url": worker.url}])) as boss,
    ):
        await send(boss.url, {"message": "go"})
    offered = {t["function"]["name"]: t["function"] for t in fake_openai.completions[0].json["tools"]}
    assert list(offered) == ["worker__send_message"]  # never the alias too
    assert offered["worker__send_message"]["description"].startswith(
        "Paper Finder: Finds and summarises papers. Send a message"
    )


async def test_tool_calls_in_the_result_only_when_asked(fake_openai: FakeOpenAI) -> None:
    async with header_echo_server() as echo:
        cfg = config(fake_openai, servers=[{"name": "echo", "url": echo.url}])
        fake_openai.script(
            ToolCalls([Call("echo__echo_headers", {"delay": 0}), Call("echo__nope", "not json")]),
            Text("Done."),
            ToolCalls([Call("echo__echo_headers", {"delay": 0})]),
            Text("Again."),
        )
        async with agent(cfg) as running, client(running.url) as c:
            asked = await c.call_tool_mcp(
                "send_message", {"message": "hi"}, meta={"pallas.dev/toolCalls": True}
            )
            plain = await c.call_tool_mcp("send_message", {"message": "hi"})
    assert asked.content[0].text == "Done."
    echoed, bad = asked.meta["pallas.dev/toolCalls"]
    assert echoed["name"] == "echo__echo_headers"
    assert echoed["arguments"] == {"delay": 0}
    assert echoed["isError"] is False
    assert json.loads(echoed["result"]) == {"authorization": None, "x_api_key": None}
    assert bad["argumentsError"]
    assert bad["isError"] is True
    assert "pallas.dev/toolCalls" not in (plain.meta or {})


REPO = Path(__file__).resolve().parents[3]
WARM_UP_SCRIPT = """
import asyncio, sys
from pallas_runtime.server.warm_up import LAZY_FASTMCP_IMPORTS
from tests.support.agents import agent_config, serve_agent

def imported():
    return [m for m in LAZY_FASTMCP_IMPORTS if m in sys.modules]

async def main():
    assert imported() == [], imported()  # not by importing the server: by starting it
    async with serve_agent(agent_config("http://127.0.0.1:9/v1")):  # returns once ready
        print(imported())
        print(sys.modules["key_value.aio"].disable_beartype)

asyncio.run(main())
"""


async def test_what_fastmcp_imports_at_the_first_tool_call_is_imported_before_the_agent_is_ready() -> None:
    """Without it, the first call after every start paid ~0.45 s of imports (fastmcp's state store)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WARM_UP_SCRIPT, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert out.decode().split("\n")[0] == repr(list(LAZY_FASTMCP_IMPORTS))


@pytest.mark.parametrize(("environment", "checks_off"), [(None, True), ("false", False)])
async def test_the_state_store_runs_without_its_type_checks_unless_the_environment_asks(
    environment: str | None, checks_off: bool
) -> None:
    """py-key-value's beartype hook cost ~0.3 s of every start; its documented switch stays the user's."""
    env = {k: v for k, v in os.environ.items() if k != KEY_VALUE_TYPE_CHECKS}
    if environment is not None:
        env[KEY_VALUE_TYPE_CHECKS] = environment
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WARM_UP_SCRIPT, cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert out.decode().split("\n")[1] == str(checks_off)


async def test_a_client_at_the_deployment_templated_public_host_is_accepted(fake_openai: FakeOpenAI) -> None:
    """`--allowed-host` as the operator builds it from `publicURLTemplate: https://{deployment}-{agent}…`."""
    template = "https://{deployment}-{agent}.example.com/mcp"
    dep = PallasDeploymentSpec.model_validate(
        deployment("ouranos", at("spec.registry.publicURLTemplate", template))["spec"]
    )
    owner = Owner(names.AGENT_KIND, "harper", "agents", "uid-agent")
    agent_spec = PallasAgentSpec.model_validate(operator_agent("harper")["spec"])
    workload = AgentWorkload(owner, "ouranos", agent_spec, dep, (), "hash", "pallas:test")
    allowed = allowed_host_args(workload)[1::2]
    cfg = config(fake_openai)
    async with serve_app(agent_app(build_server(cfg, environ={}), allowed)) as running:
        transport = StreamableHttpTransport(running.url, headers={"Host": "ouranos-harper.example.com"})
        async with Client(transport, mode="legacy") as published:
            result = await published.call_tool("send_message", {"message": "hello"})
        assert result.content[0].text == "ok"
        async with httpx2.AsyncClient() as http:
            for wrong in ("{deployment}-harper.example.com", "evil.example.com"):
                refused = await http.post(running.url, headers={"Host": wrong}, json={})
                assert refused.status_code == 421, wrong
