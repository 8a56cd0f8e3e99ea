"""The agent loop with an in-memory provider and sources: tools, policy, errors, limits, metrics."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from pallas_api.config import parse_config
from pallas_api.errors import ErrorCode
from pallas_api.fields import RequestParams
from pallas_io.logs import SecretValues
from pallas_runtime.agent.loop import AgentLoop, MaxIterationsExceeded, ToolChoiceUnavailable, llm_tool_name
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.agent.turn import Turn
from pallas_runtime.conversations.caller import Caller
from pallas_runtime.downstream.source import DownstreamError, DownstreamTimeout, ProgressHandler, ToolOutcome
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import (
    AssistantMessage,
    Completion,
    TextPart,
    ToolCall,
    ToolResultsMessage,
    Usage,
    UserMessage,
)
from pallas_runtime.metrics import RuntimeMetrics
from tests.unit.agent.doubles import FakeSource, ScriptedProvider, calls, failing, text


def make(
    script: list[Any], sources: list[FakeSource], *, secrets: SecretValues | None = None, **config: Any
) -> tuple[AgentLoop, ScriptedProvider, RuntimeMetrics]:
    cfg = parse_config(
        {
            "name": "harper",
            "model": "m",
            "provider": {"name": "p", "type": "openai"},
            "instruction": "be useful",
            **config,
        }
    )
    provider = ScriptedProvider(script)
    metrics = RuntimeMetrics(process_collectors=False)
    return AgentLoop(cfg, provider, sources, metrics, secrets), provider, metrics


def value(metrics: RuntimeMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


USER = UserMessage((TextPart("hello"),))


def turn(auth: str | None = None, reporter: ProgressReporter | None = None, **more: Any) -> Turn:
    return Turn(Caller("anonymous"), auth, reporter or ProgressReporter("harper", None), **more)


async def run(loop: AgentLoop, auth: str | None = None, reporter: ProgressReporter | None = None) -> Any:
    return await loop.run([], USER, turn(auth, reporter))


async def test_a_plain_answer_takes_one_llm_turn() -> None:
    loop, provider, metrics = make([text("hi there")], [])
    result = await run(loop)
    assert result.text == "hi there"
    assert result.messages == [USER, AssistantMessage("hi there")]
    system, messages, tools = provider.calls[0]
    assert (system, messages, tools) == ("be useful", [USER], [])
    assert value(metrics, "pallas_llm_turns_total", agent="harper", model="m") == 1
    assert value(metrics, "pallas_llm_tokens_total", agent="harper", model="m", kind="input") == 20
    assert value(metrics, "pallas_llm_tokens_total", agent="harper", model="m", kind="cache_read") == 3
    assert value(metrics, "pallas_llm_tokens_total", agent="harper", model="m", kind="reasoning") == 1


async def test_tool_calls_run_in_parallel_and_results_go_back_to_the_model() -> None:
    started: list[str] = []
    gate = asyncio.Event()

    async def slow(
        tool: str, arguments: dict[str, Any], auth: str | None, p: ProgressHandler | None
    ) -> ToolOutcome:
        started.append(tool)
        if len(started) == 2:
            gate.set()
        await asyncio.wait_for(gate.wait(), 2)  # both calls must be in flight at once
        return ToolOutcome((TextPart(f"{tool} done"),))

    argos = FakeSource("argos", ["search", "fetch"], handler=slow)
    loop, provider, metrics = make([calls("argos__search", "argos__fetch"), text("summary")], [argos])
    result = await run(loop, auth="Bearer t")
    assert result.text == "summary"
    tool_round = result.messages[2]
    assert isinstance(tool_round, ToolResultsMessage)
    assert [(r.call_id, r.content[0]) for r in tool_round.results] == [
        ("id0", TextPart("search done")),
        ("id1", TextPart("fetch done")),
    ]
    assert [t.name for t in provider.calls[0][2]] == ["argos__search", "argos__fetch"]
    assert provider.calls[1][1][-1] == tool_round
    assert (
        value(
            metrics, "pallas_tool_calls_total", agent="harper", server="argos", operation="tool", outcome="ok"
        )
        == 2
    )


async def test_the_policy_hides_denied_tools_and_refuses_them_at_dispatch() -> None:
    argos = FakeSource("argos", ["search", "delete_index"])
    loop, provider, metrics = make(
        [calls("argos__delete_index"), text("ok")],
        [argos],
        tools={"allow": ["argos__*"], "deny": ["argos__delete_*"]},
    )
    result = await run(loop)
    assert [t.name for t in provider.calls[0][2]] == ["argos__search"]
    denied = result.messages[2].results[0]
    assert denied.is_error
    assert denied.content == (TextPart("tool 'argos__delete_index' is not allowed for this agent"),)
    assert argos.calls == []
    assert value(metrics, "pallas_tool_denied_total", agent="harper", server="argos") == 1


async def test_unknown_tools_and_malformed_arguments_become_error_results() -> None:
    argos = FakeSource("argos", ["search"])
    bad_args = Completion("", (ToolCall("x1", "argos__search", {}, arguments_error="not valid JSON"),))
    loop, _, _ = make([calls("nope__tool"), bad_args, text("gave up")], [argos])
    result = await run(loop)
    unknown = result.messages[2].results[0]
    assert unknown.content == (TextPart("unknown tool 'nope__tool'; available tools: argos__search"),)
    malformed = result.messages[4].results[0]
    assert malformed.content == (TextPart("arguments for 'argos__search' are invalid: not valid JSON"),)
    assert argos.calls == []
    assert result.text == "gave up"


async def test_downstream_failures_go_back_to_the_model_and_count_as_errors() -> None:
    argos = FakeSource("argos", ["search"], handler=failing)
    loop, _, metrics = make([calls("argos__search"), text("sorry")], [argos])
    result = await run(loop)
    failed = result.messages[2].results[0]
    assert failed.is_error
    assert failed.content == (TextPart("argos: calling search failed: connection refused"),)
    assert (
        value(
            metrics,
            "pallas_tool_calls_total",
            agent="harper",
            server="argos",
            operation="tool",
            outcome="error",
        )
        == 1
    )


async def test_each_failed_tool_call_is_logged_with_its_code(caplog: pytest.LogCaptureFixture) -> None:
    async def timing_out(tool: str, *_: Any) -> ToolOutcome:
        raise DownstreamTimeout(f"argos: {tool} timed out after 3s")

    async def refusing_peer(*_: Any) -> ToolOutcome:
        return ToolOutcome(
            (TextPart("agent x is already in this call's path"),), True, ErrorCode.LOOP_DETECTED
        )

    argos = FakeSource("argos", ["search", "drop"], handler=timing_out)
    peer = FakeSource("peer", ["send_message"], handler=refusing_peer)
    bad_args = Completion("", (ToolCall("x1", "argos__search", {}, arguments_error="not valid JSON"),))
    loop, _, _ = make(
        [calls("nope__tool", "argos__drop", "argos__search", "peer__send_message"), bad_args, text("done")],
        [argos, peer],
        tools={"deny": ["argos__drop"]},
    )
    with caplog.at_level("INFO", logger="pallas.audit"):
        await run(loop)
    audit = [r for r in caplog.records if r.name == "pallas.audit"]
    codes = [(r.server, r.tool, getattr(r, "code", None)) for r in audit]  # type: ignore[attr-defined]
    assert sorted(codes) == [
        ("", "nope__tool", "TOOL_NOT_FOUND"),
        ("argos", "drop", "DENIED_BY_POLICY"),
        ("argos", "search", "INVALID_ARGUMENTS"),
        ("argos", "search", "TIMEOUT"),
        ("peer", "send_message", "LOOP_DETECTED"),
    ]


async def test_a_forced_tool_choice_applies_to_the_first_round_only() -> None:
    argos = FakeSource("argos", ["search"])
    loop, provider, _ = make(
        [calls("argos__search"), text("found")], [argos], requestParams={"toolChoice": "required", "seed": 3}
    )
    await run(loop)
    assert [(p.tool_choice, p.seed) for p in provider.params if p] == [("required", 3), (None, 3)]


async def test_a_named_tool_choice_is_the_models_name_for_it_and_must_be_offered() -> None:
    tools = FakeSource("tools", ["look.up"])
    loop, provider, _ = make([calls(llm_tool_name("tools__look.up")), text("ok")], [tools])
    call = RequestParams.model_validate({"toolChoice": "tools__look.up", "temperature": 0.3})
    await loop.run([], USER, turn(params=call))
    assert [(p.tool_choice, p.temperature) for p in provider.params if p] == [
        (llm_tool_name("tools__look.up"), 0.3),
        (None, 0.3),
    ]
    missing = RequestParams(tool_choice="argos__search")
    with pytest.raises(
        ToolChoiceUnavailable, match=r"toolChoice 'argos__search' is not a tool this agent offers"
    ):
        await loop.run([], USER, turn(params=missing))


async def test_a_source_that_cannot_list_is_left_out_of_the_turn() -> None:
    down = FakeSource("down", ["x"], list_error=ConnectionError("refused"))
    up = FakeSource("up", ["y"])
    loop, provider, _ = make([text("fine")], [down, up])
    assert (await run(loop)).text == "fine"
    assert [t.name for t in provider.calls[0][2]] == ["up__y"]


async def test_max_iterations_ends_the_call_with_a_clear_error() -> None:
    argos = FakeSource("argos", ["search"])
    loop, provider, _ = make([calls("argos__search")] * 5, [argos], maxIterations=3)
    with pytest.raises(MaxIterationsExceeded, match="stopped after 3 LLM/tool rounds"):
        await run(loop)
    assert len(provider.calls) == 3


async def test_llm_errors_propagate_and_are_timed_as_errors() -> None:
    loop, _, metrics = make([LLMError("openai provider 'p': HTTP 500: boom", status=500)], [])
    with pytest.raises(LLMError, match="HTTP 500"):
        await run(loop)
    assert (
        metrics.registry.get_sample_value(
            "pallas_llm_request_duration_seconds_count", {"agent": "harper", "model": "m", "outcome": "error"}
        )
        == 1
    )


@pytest.mark.parametrize("reply", ["", "  \n"])
async def test_a_reply_with_neither_text_nor_tool_calls_is_an_error_not_an_empty_answer(reply: str) -> None:
    loop, provider, _ = make([Completion(reply, stop_reason="content_filter")], [])
    with pytest.raises(
        LLMError,
        match=r"^p: the model answered with neither text nor tool calls \(stop reason content_filter\)$",
    ):
        await run(loop)
    assert len(provider.calls) == 1


async def test_the_inbound_bearer_is_passed_per_call() -> None:
    argos = FakeSource("argos", ["search"])
    results = []
    for token in ("Bearer alice", "Bearer bob", None):
        loop, _, _ = make([calls("argos__search"), text("ok")], [argos])
        results.append(await run(loop, auth=token))
    assert [auth for _, _, auth in argos.calls] == ["Bearer alice", "Bearer bob", None]


async def test_progress_covers_steps_tools_and_relayed_progress() -> None:
    sent: list[tuple[float, float | None, str]] = []

    async def send(progress: float, total: float | None, message: str) -> None:
        sent.append((progress, total, message))

    research = FakeSource("research", ["send_message"])
    loop, _, _ = make([calls("research__send_message"), text("done")], [research])
    await run(loop, reporter=ProgressReporter("harper", send))
    assert sent == [
        (1, None, "harper step 1 (llm)"),
        (2, None, "harper step 2 (tool)"),
        (3, None, "research/send_message: started"),
        (4, None, "research/send_message: halfway"),
        (5, None, "research/send_message: completed"),
        (6, None, "harper step 3 (llm)"),
        (7, None, "harper text: done"),
    ]


def test_llm_tool_names_are_valid_for_every_provider() -> None:
    assert llm_tool_name("argos__search") == "argos__search"
    odd = llm_tool_name("server__tool.with/odd:chars")
    assert odd.startswith("server__tool_with_odd_chars")
    long = llm_tool_name("s__" + "x" * 100)
    assert len(long) == 64
    assert long != llm_tool_name("s__" + "x" * 99 + "y")


async def test_every_tool_call_gets_one_audit_line_without_arguments_or_results(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def answer(
        tool: str, arguments: dict[str, Any], auth: str | None, p: ProgressHandler | None
    ) -> Any:
        if tool == "slow":
            raise DownstreamTimeout("argos: slow timed out after 30s")
        if tool == "broken":
            raise DownstreamError("argos: calling broken failed: HTTP 500")
        if tool == "bad":
            return ToolOutcome((TextPart("result-secret: no such index"),), is_error=True)
        return ToolOutcome((TextPart("result-secret: found it"),))

    argos = FakeSource("argos", ["search", "slow", "broken", "bad", "drop"], handler=answer)
    names = ["argos__search", "argos__slow", "argos__broken", "argos__bad", "argos__drop", "nope__x"]
    loop, _, _ = make(
        [calls(*names, args="argument-secret"), text("done")], [argos], tools={"deny": ["argos__drop"]}
    )
    with caplog.at_level(logging.INFO, logger="pallas.audit"):
        await run(loop)
    audit = [r for r in caplog.records if r.name == "pallas.audit"]
    assert sorted((r.agent, r.server, r.tool, r.outcome) for r in audit) == [  # type: ignore[attr-defined]
        ("harper", "", "nope__x", "DENY"),
        ("harper", "argos", "bad", "ERROR"),
        ("harper", "argos", "broken", "ERROR"),
        ("harper", "argos", "drop", "DENY"),
        ("harper", "argos", "search", "ALLOW"),
        ("harper", "argos", "slow", "TIMEOUT"),
    ]
    assert all(isinstance(r.latency_ms, float) and r.latency_ms >= 0 for r in audit)  # type: ignore[attr-defined]
    for record in audit:
        line = record.getMessage() + repr(vars(record))
        assert "secret" not in line, line
    denied = next(r for r in audit if r.tool == "drop")  # type: ignore[attr-defined]
    assert denied.getMessage() == "tool call argos/drop: DENY in 0 ms (not allowed by spec.tools)"


async def test_the_agents_secrets_are_scrubbed_from_results_errors_and_progress_before_the_cut() -> None:
    key = "sk-provider-key-123456"
    header = "x" * 1010 + key  # cut at 1024 bytes unscrubbed, it would keep the key's first 14

    async def leaky(
        tool: str, arguments: dict[str, Any], auth: str | None, progress: ProgressHandler | None
    ) -> ToolOutcome:
        if tool == "fail":
            raise DownstreamError(f"argos: {tool} failed: HTTP 401: bad key {key}")
        assert progress is not None
        await progress(0.5, 1, f"sent {key}")
        return ToolOutcome((TextPart(header),))

    loop, provider, _ = make(
        [calls("argos__echo", "argos__fail"), text("done")],
        [FakeSource("argos", ["echo", "fail"], handler=leaky)],
        secrets=SecretValues([key]),
        limits={"maxToolResultBytes": 1024},
    )
    sent: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        sent.append(message)

    result = await run(loop, reporter=ProgressReporter("harper", on_progress))
    results = result.messages[2]
    assert isinstance(results, ToolResultsMessage)
    texts = [part.text for r in results.results for part in r.content if isinstance(part, TextPart)]
    assert texts[0] == "x" * 1010 + "[redacted]"
    assert texts[1] == "argos: fail failed: HTTP 401: bad key [redacted]"
    assert "argos/echo: sent [redacted]" in sent
    assert not any(key[:8] in str(t) for t in [*texts, *sent, provider.calls])


# --- streamed text --------------------------------------------------------------------------


def recorder() -> tuple[list[str], ProgressReporter]:
    sent: list[str] = []

    async def send(progress: float, total: float | None, message: str) -> None:
        sent.append(message)

    return sent, ProgressReporter("harper", send)


async def test_streamed_text_reaches_the_caller_joined_into_few_exact_pieces() -> None:
    sent, reporter = recorder()
    answer = " ".join(f"word{i}" for i in range(200))
    loop, _, _ = make([text(answer)], [])
    result = await run(loop, reporter=reporter)
    pieces = [m.removeprefix("harper text: ") for m in sent if m.startswith("harper text: ")]
    assert "".join(pieces) == answer == result.text  # exact, in order; the result unchanged
    assert pieces[0] == "word0"  # the first piece goes out at once
    assert 2 <= len(pieces) < 20  # 200 words in far fewer notifications


async def test_text_beside_tool_calls_reaches_the_caller_when_the_provider_does_not_stream() -> None:
    sent, reporter = recorder()
    thinking = Completion("Let me look that up.", calls("argos__search").tool_calls, Usage(input=1, output=1))
    loop, provider, _ = make([thinking, text("found it")], [FakeSource("argos", ["search"])])
    provider.streams = False
    result = await run(loop, reporter=reporter)
    assert [m for m in sent if " text: " in m] == ["harper text: Let me look that up."]
    assert result.text == "found it"  # a final answer is not sent twice when nothing streamed


async def test_without_a_progress_token_nothing_is_streamed() -> None:
    loop, provider, _ = make([text("quiet")], [])
    seen: list[str] = []
    original = provider.complete

    async def spy(**kwargs: Any) -> Completion:
        seen.append("on_text" if kwargs.get("on_text") else "none")
        return await original(**kwargs)

    provider.complete = spy  # type: ignore[method-assign]
    await run(loop)
    assert seen == ["none"]
