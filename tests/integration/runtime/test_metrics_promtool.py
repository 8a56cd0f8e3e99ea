"""The agent's /metrics is valid Prometheus exposition and carries the families of docs/api.md §5.

One agent (FakeOpenAI provider, one downstream fastmcp server `calc` whose tool `secret` the
agent's policy denies) gets a small, fixed mix of traffic: a send_message that calls an allowed
and a denied tool, one whose LLM call fails, one with an empty message, one with an unknown
argument, and a get_health. Then /metrics is scraped and checked by `promtool check metrics`
(Debian's prometheus package, installed by hack/build/system-deps.sh), which must print nothing at
all: no error and no lint warning. The documented families are read from the table in
docs/api.md §5 itself, so the doc and the exposition cannot drift apart silently.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from fastmcp import Client, FastMCP
from prometheus_client.parser import text_string_to_metric_families

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, HttpError, Text, ToolCalls
from tests.support.mcp_servers import serve

pytestmark = pytest.mark.asyncio(loop_scope="module")

REPO = Path(__file__).resolve().parents[3]
API_DOC = REPO / "docs" / "api.md"
SYSTEM_DEPS = REPO / "hack" / "build" / "system-deps.sh"
AGENT = "metrics-test"
# Label values that must never reach a series (docs/api.md §5: labels stay bounded).
SECRET_MESSAGE = "msg-secret-4711"
SECRET_CONVERSATION = "conv-secret-0815"
OUTCOMES = {"ok", "error"}
AUTH_OUTCOMES = {"allowed", "denied", "unauthenticated", "unavailable"}
RELOAD_OUTCOMES = {"applied", "refused", "invalid"}
TOKEN_KINDS = {"input", "output", "cache_read", "cache_write", "reasoning"}


def documented_families() -> dict[str, tuple[str, set[str]]]:
    """`name -> (type, labels)` from the metrics table of docs/api.md §5 (agent-side rows)."""
    section = API_DOC.read_text().split("\n## 5.", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*`(pallas_\w+)`\s*\|\s*(\w+)\s*\|([^|\n]*)\|", section, re.MULTILINE)
    return {name: (kind, set(re.findall(r"`(\w+)`", labels))) for name, kind, labels in rows}


def calc_mcp() -> FastMCP:
    mcp = FastMCP("calc")

    @mcp.tool(output_schema=None)
    def add(a: int, b: int) -> str:
        """Add two numbers."""
        return str(a + b)

    @mcp.tool(output_schema=None)
    def secret() -> str:
        """Denied by the agent's tool policy."""
        return "should never run"

    return mcp


@dataclass
class Traffic:
    exposition: str
    content_type: str
    errors_after: dict[str, float]
    """`pallas_send_message_total{outcome="error"}` after each step, by step name."""


def _errors(exposition: str) -> float:
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "pallas_send_message_total" and sample.labels == {
                "agent": AGENT,
                "outcome": "error",
            }:
                return float(sample.value)
    return 0.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def traffic() -> AsyncIterator[Traffic]:
    async with FakeOpenAI() as llm, serve(calc_mcp()) as calc:
        config = agent_config(
            llm.base_url,
            name=AGENT,
            servers=[{"name": "calc", "url": calc.url}],
            tools={"deny": ["calc__secret"]},
            capabilities={"price": {"input": 1, "output": 2}},  # so the cost families have series
            budgets={"callerMetrics": True},
        )
        async with (
            serve_agent(config) as agent,
            httpx2.AsyncClient(base_url=agent.base_url) as http,
            Client(agent.url, mode="legacy", timeout=30) as client,
        ):

            async def scrape() -> str:
                response = await http.get("/metrics")
                assert response.status_code == 200
                return response.text

            errors: dict[str, float] = {"start": _errors(await scrape())}

            async def step(
                name: str, tool: str, arguments: dict[str, Any], *, error: str | None = None
            ) -> None:
                result = await client.call_tool_mcp(tool, arguments)
                assert result.is_error is (error is not None), (name, result)
                if error is not None:
                    assert error in result.content[0].text, (name, result)
                errors[name] = _errors(await scrape())

            llm.script(
                ToolCalls([Call("calc__add", {"a": 1, "b": 2}), Call("calc__secret", "{}")]), Text("3")
            )
            arguments = {"message": SECRET_MESSAGE, "conversation_id": SECRET_CONVERSATION}
            await step("ok", "send_message", arguments)
            llm.script(HttpError(500, "the model is down"))
            # Sessionless (no conversation key), so the failed turn leaves no conversation behind.
            async with Client(agent.url, timeout=30) as sessionless:
                result = await sessionless.call_tool_mcp("send_message", {"message": "again"})
            assert result.is_error, result
            errors["llm failure"] = _errors(await scrape())
            await step("empty message", "send_message", {"message": ""}, error="message is empty")
            await step("unknown argument", "send_message", {"message": "hi", "bogus": 1}, error="bogus")
            await step("health", "get_health", {})
            # One request refused at the edge, so the refusals counter has a series.
            twice = [("Authorization", "Bearer a"), ("Authorization", "Bearer b")]
            assert (await http.post("/mcp", json={}, headers=twice)).status_code == 400

            response = await http.get("/metrics")
            yield Traffic(response.text, response.headers["content-type"], errors)


@pytest.fixture(scope="session")
def promtool() -> str:
    """promtool, installed by hack/build/system-deps.sh when missing (instant when present)."""
    res = subprocess.run([str(SYSTEM_DEPS)], capture_output=True, text=True, timeout=600, check=False)
    path = shutil.which("promtool")
    if res.returncode != 0 or path is None:
        last = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        pytest.fail(
            f"promtool unavailable: hack/build/system-deps.sh exited {res.returncode}: {last}", pytrace=False
        )
    return path


async def test_promtool_accepts_the_exposition_without_a_word(traffic: Traffic, promtool: str):
    proc = await asyncio.create_subprocess_exec(
        promtool,
        "check",
        "metrics",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(traffic.exposition.encode()), 30)
    assert proc.returncode == 0, out.decode()
    assert out.decode() == "", "promtool printed lint findings"


async def test_content_type_is_the_classic_text_format(traffic: Traffic):
    assert traffic.content_type == "text/plain; version=0.0.4; charset=utf-8"


async def test_every_documented_family_has_its_type_and_labels(traffic: Traffic):
    documented = documented_families()
    assert len(documented) >= 14, documented  # the table parsed (and nobody dropped rows silently)
    scraped = {family.name: family for family in text_string_to_metric_families(traffic.exposition)}
    for name, (kind, labels) in documented.items():
        family = scraped.get(name.removesuffix("_total") if kind == "counter" else name)
        assert family is not None, f"{name} is documented but not exposed"
        assert family.type == kind, f"{name}: exposed as {family.type}, documented as {kind}"
        assert family.samples, f"{name}: no series after the test traffic"
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == labels, f"{name}: {sample}"
            if "agent" in labels:
                assert sample.labels["agent"] == AGENT, sample
            if "outcome" in labels:
                expected = {
                    "pallas_auth_requests_total": AUTH_OUTCOMES,
                    "pallas_config_reloads_total": RELOAD_OUTCOMES,
                }.get(name, OUTCOMES)
                assert sample.labels["outcome"] in expected, sample
            if "kind" in labels and kind == "counter":
                assert sample.labels["kind"] in TOKEN_KINDS, sample


def _value(exposition: str, sample_name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == sample_name and sample.labels == labels:
                return float(sample.value)
    return None


async def test_values_follow_the_traffic(traffic: Traffic):
    text = traffic.exposition
    agent = {"agent": AGENT}
    assert _value(text, "pallas_up") == 1
    assert _value(text, "pallas_agent_info", **agent, model="fake-model", port="") == 1
    assert _value(text, "pallas_send_message_total", **agent, outcome="ok") == 1
    assert _value(text, "pallas_send_message_total", **agent, outcome="error") == 3
    assert _value(text, "pallas_send_message_duration_seconds_count", **agent) == 4
    assert _value(text, "pallas_llm_turns_total", **agent, model="fake-model") == 2
    assert (
        _value(
            text, "pallas_llm_request_duration_seconds_count", **agent, model="fake-model", outcome="error"
        )
        == 1
    )
    assert _value(text, "pallas_llm_tokens_total", **agent, model="fake-model", kind="input") == 20
    ok_calls = _value(text, "pallas_tool_calls_total", **agent, server="calc", operation="tool", outcome="ok")
    assert ok_calls == 1
    assert _value(text, "pallas_tool_denied_total", **agent, server="calc") == 1
    assert _value(text, "pallas_downstream_up", **agent, server="calc") == 1
    assert _value(text, "pallas_llm_provider_up", provider="fake") == 1
    assert _value(text, "pallas_agent_health_status", **agent) == 1
    assert _value(text, "pallas_active_conversations", **agent) == 1


async def test_error_outcome_counts_bad_input_and_unknown_arguments(traffic: Traffic):
    errors = traffic.errors_after
    assert errors["ok"] == errors["start"] == 0
    assert errors["llm failure"] == 1
    assert errors["empty message"] == 2, "an empty message must count as outcome=error"
    assert errors["unknown argument"] == 3, "a call with an unknown argument must count as outcome=error"
    assert errors["health"] == 3, "get_health is not a send_message"


async def test_labels_never_carry_message_or_conversation_text(traffic: Traffic):
    assert SECRET_MESSAGE not in traffic.exposition
    assert SECRET_CONVERSATION not in traffic.exposition
