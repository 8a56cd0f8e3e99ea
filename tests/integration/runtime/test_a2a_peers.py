"""A Pallas agent delegating to A2A agents: one built with the a2a-sdk's own server (nothing of
Pallas in it), and another Pallas agent over A2A, with loop protection across the two."""

from __future__ import annotations

from typing import Any

from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server import agent_app, build_server
from tests.support.a2a_agents import echo_a2a_agent
from tests.support.a2a_clients import a2a_client, final_task, text_request
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import bound_socket, serve_app

KEY_FROM_ENV = {"name": "X-Api-Key", "valueFromEnv": "HELPER_KEY"}
ASK_HELPER = Call("helper__send_message", {"message": "ping"})


def _tool_results(request_json: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in request_json["messages"] if m["role"] == "tool"]


async def test_an_orchestrator_delegates_to_an_sdk_built_a2a_agent(fake_openai: FakeOpenAI) -> None:
    async with echo_a2a_agent(require_key="k-4711") as helper:
        cfg = agent_config(
            fake_openai.base_url,
            name="boss",
            a2aAgents=[
                {
                    "name": "helper",
                    "url": helper.url,
                    "headers": [{"name": "X-Api-Key", "valueFromEnv": "HELPER_KEY"}],
                }
            ],
        )
        fake_openai.script(
            ToolCalls([Call("helper__send_message", {"message": "ping"})]), Text("It said echo.")
        )
        async with (
            serve_agent(cfg, environ={"HELPER_KEY": "k-4711"}) as boss,
            a2a_client(boss.base_url) as client,
        ):
            task = await final_task(client, text_request("Ask the helper."))
    first, second = fake_openai.completions
    (tool,) = first.json["tools"]
    assert tool["function"]["name"] == "helper__send_message"
    assert "Says back what it is told." in tool["function"]["description"]
    assert _tool_results(second.json) == ["echo: ping"]
    (received,) = helper.received
    assert received.text == "ping"
    assert received.metadata["pallas.dev/callPath"] == ["boss"]
    assert received.context_id.startswith("pallas-boss-")
    assert received.headers["x-api-key"] == "k-4711"
    assert "authorization" not in received.headers  # an external agent gets no caller bearer
    assert task.artifacts[0].parts[0].text == "It said echo."


async def test_a_wrong_key_is_an_error_result_the_model_reads(fake_openai: FakeOpenAI) -> None:
    async with echo_a2a_agent(require_key="right") as helper:
        cfg = agent_config(
            fake_openai.base_url,
            name="boss",
            a2aAgents=[
                {"name": "helper", "url": helper.url, "headers": [{"name": "X-Api-Key", "value": "wrong"}]}
            ],
        )
        fake_openai.script(ToolCalls([ASK_HELPER]), Text("It failed."))
        async with serve_agent(cfg) as boss, a2a_client(boss.base_url) as client:
            await final_task(client, text_request("Ask the helper."))
    (result,) = _tool_results(fake_openai.completions[1].json)
    assert "helper" in result
    assert "401" in result or "failed" in result
    assert helper.received == []


async def test_a_loop_through_two_pallas_agents_over_a2a_is_refused(fake_openai: FakeOpenAI) -> None:
    """alpha asks beta over A2A, beta's model asks alpha back: alpha refuses, beta's model reads why."""
    alpha_sock, beta_sock = bound_socket(), bound_socket()
    alpha_url = f"http://127.0.0.1:{alpha_sock.getsockname()[1]}"
    beta_url = f"http://127.0.0.1:{beta_sock.getsockname()[1]}"

    def step(request_json: dict[str, Any]) -> Any:
        system = str(request_json["messages"][0]["content"])
        results = _tool_results(request_json)
        if results:
            return Text(f"{system.split()[0]} got: {results[-1]}")
        target = "beta" if system.startswith("alpha") else "alpha"
        return ToolCalls([Call(f"{target}__send_message", {"message": "hello"})])

    fake_openai.default = step
    metrics = RuntimeMetrics()
    alpha = agent_config(
        fake_openai.base_url,
        name="alpha",
        instruction="alpha agent",
        a2aAgents=[{"name": "beta", "url": beta_url}],
    )
    beta = agent_config(
        fake_openai.base_url,
        name="beta",
        instruction="beta agent",
        a2aAgents=[{"name": "alpha", "url": alpha_url}],
    )
    async with (
        serve_app(agent_app(build_server(alpha, metrics=metrics, environ={})), sock=alpha_sock),
        serve_app(agent_app(build_server(beta, metrics=metrics, environ={})), sock=beta_sock),
        a2a_client(alpha_url) as client,
    ):
        task = await final_task(client, text_request("start"))
    answer = task.artifacts[0].parts[0].text
    # beta refused to call alpha, unsent: alpha is already in the path that reached beta over A2A.
    assert answer.startswith("alpha got: beta got: ")
    assert (
        "calling agent alpha would loop: it is already in this call's path (alpha → beta → alpha)" in answer
    )


async def test_an_unreachable_a2a_agent_is_offered_and_its_call_fails_with_its_name(
    fake_openai: FakeOpenAI,
) -> None:
    sock = bound_socket()  # bound, never served: connections are refused
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    cfg = agent_config(fake_openai.base_url, name="boss", a2aAgents=[{"name": "ghost", "url": url}])
    fake_openai.script(ToolCalls([Call("ghost__send_message", {"message": "boo"})]), Text("It is gone."))
    async with serve_agent(cfg) as boss, a2a_client(boss.base_url) as client:
        task = await final_task(client, text_request("Ask the ghost."))
    (tool,) = fake_openai.completions[0].json["tools"]
    assert tool["function"]["description"] == "Send a message to the A2A agent ghost."
    (result,) = _tool_results(fake_openai.completions[1].json)
    assert "ghost: calling send_message failed" in result, result
    assert task.artifacts[0].parts[0].text == "It is gone."
