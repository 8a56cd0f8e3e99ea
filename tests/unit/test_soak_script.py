"""The soak's protocol (tests/support/soak/script.py): the fake LLM's answers tell a lost context,
a leak and a failed delegation apart from a healthy turn, on the OpenAI wire's message shapes."""

from __future__ import annotations

import json
from typing import Any

from tests.support.fake_llm import Delay, Text, ToolCalls
from tests.support.soak.script import (
    ORCHESTRATOR,
    RESEARCHER,
    Turn,
    Verdict,
    answer,
    instruction,
    llm_script,
    role_of,
    secret_for,
)

PEER_TOOL = {"type": "function", "function": {"name": "researcher__send_message", "parameters": {}}}
SECRET = secret_for("c01")


def system(role: str, revision: int = 1) -> dict[str, Any]:
    return {"role": "system", "content": instruction(role, revision)}


def turn(
    number: int, acked: tuple[int, ...] = (), delegated: tuple[int, ...] = (), delegate: bool = True
) -> Turn:
    return Turn("c01", "conv-1", number, SECRET, acked, delegated, delegate)


def exchange(t: Turn) -> list[dict[str, Any]]:
    """A stored earlier turn as the orchestrator's model is sent it."""
    return [{"role": "user", "content": t.text()}, {"role": "assistant", "content": "soak-verdict ..."}]


def orchestrator_request(history: list[dict[str, Any]], current: Turn) -> dict[str, Any]:
    return {
        "messages": [system(ORCHESTRATOR), *history, {"role": "user", "content": current.text()}],
        "tools": [PEER_TOOL],
    }


def text(step: Text | ToolCalls) -> str:
    assert isinstance(step, Text), step
    return step.text


def delegate_and_finish(request: dict[str, Any], research_answer: str) -> Verdict:
    """The orchestrator's first call (a call to the researcher), then its second with the result."""
    first = answer(request)
    assert isinstance(first, ToolCalls)
    (call,) = first.calls
    assert call.name == "researcher__send_message"
    request["messages"] += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call-1", "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}]},
        {"role": "tool", "tool_call_id": "call-1", "content": research_answer},
    ]  # fmt: skip
    verdict = Verdict.parse(text(answer(request)))
    assert verdict is not None
    return verdict


def test_a_turn_round_trips_through_its_text() -> None:
    t = turn(4, (1, 2, 3), (1, 3))
    assert Turn.parse(f"noise before\n{t.text()}\nnoise after") == t
    research = Turn.parse(t.research().text(), "soak-research")
    assert research is not None
    assert (research.number, research.acked) == (4, (1, 3))
    assert Turn.parse("soak-turn caller=c01 turn=x") is None
    assert Turn.parse(t.text(), "soak-research") is None


def test_roles_are_told_by_instruction_whatever_the_revision() -> None:
    assert role_of(instruction(ORCHESTRATOR, 7)) == (ORCHESTRATOR, 7)
    assert role_of(instruction(RESEARCHER, 1)) == (RESEARCHER, 1)
    assert role_of("You are a helpful assistant.") is None
    assert isinstance(answer({"messages": [{"role": "system", "content": "other"}]}), Text)


def test_a_healthy_delegated_turn_sees_every_acknowledged_turn_at_both_agents() -> None:
    history = [*exchange(turn(1)), *exchange(turn(2, (1,), (1,)))]
    request = orchestrator_request(history, turn(3, (1, 2), (1, 2)))
    first = answer(request)
    assert isinstance(first, ToolCalls)
    research_text = str(first.calls[0].arguments["message"])  # type: ignore[index]
    researcher = {
        "messages": [
            system(RESEARCHER),
            {"role": "user", "content": turn(1).research().text()},
            {"role": "assistant", "content": "soak-research-verdict turn=1"},
            {"role": "user", "content": turn(2, (1,), (1,)).research().text()},
            {"role": "assistant", "content": "soak-research-verdict turn=2"},
            {"role": "user", "content": research_text},
        ]
    }
    research_answer = text(answer(researcher))
    assert research_answer == "soak-research-verdict turn=3 missing= leaks="
    verdict = delegate_and_finish(request, research_answer)
    assert (verdict.turn, verdict.research, verdict.context_lost, verdict.leaked) == (3, "ok", False, ())


def test_a_missing_turn_is_a_context_loss_at_the_agent_that_lacks_it() -> None:
    request = orchestrator_request(exchange(turn(1)), turn(3, (1, 2), (1, 2)))  # turn 2 is gone
    verdict = delegate_and_finish(request, "soak-research-verdict turn=3 missing=1 leaks=")
    assert verdict.missing == (2,)
    assert verdict.research_missing == (1,)
    assert verdict.context_lost


def test_another_callers_secret_anywhere_in_the_request_is_a_leak() -> None:
    stranger = Turn("c07", "conv-9", 1, secret_for("c07"))
    history = [*exchange(turn(1)), {"role": "user", "content": stranger.text()}]
    request = orchestrator_request(history, turn(2, (1,), delegate=False))
    verdict = Verdict.parse(text(answer(request)))
    assert verdict is not None
    assert verdict.leaked == ("c07",)
    assert verdict.research == "none"
    # The stranger's turn does not count as one of ours either.
    assert not verdict.context_lost


def test_a_failed_delegation_is_told_apart_from_an_answer() -> None:
    request = orchestrator_request([], turn(1))
    error = "Error calling researcher/send_message: agent researcher is shutting down; send it again"
    verdict = delegate_and_finish(request, error)
    assert verdict.research == "failed"
    assert verdict.research_error.startswith("Error_calling_researcher/send_message:_agent")
    assert " " not in verdict.research_error


def test_the_script_answers_after_the_models_latency() -> None:
    step = llm_script(2.5)(orchestrator_request([], turn(1, delegate=False)))
    assert isinstance(step, Delay)
    assert step.seconds == 2.5
    assert isinstance(step.then, Text)
    assert step.then.text.startswith("soak-verdict turn=1 ")
    assert Verdict.parse("the model said something else") is None
