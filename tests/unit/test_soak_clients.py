"""What the soak's callers make of errors (tests/support/soak/clients.py): a code per failure,
the retryable ones told apart, and a bounded number of sends."""

from __future__ import annotations

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from tests.support.soak.clients import RETRYABLE, Budget, Caller, Conversation, classify, error_code
from tests.support.soak.script import Turn


def test_transport_failures_get_codes_a_reader_can_act_on() -> None:
    request = httpx2.Request("POST", "http://orchestrator/mcp")
    assert classify(MCPError(-32600, "Session not found")) == "SESSION_LOST"
    assert classify(MCPError(-32600, "Session terminated")) == "SESSION_LOST"
    assert classify(MCPError(-32000, "Connection closed")) == "CONNECTION_LOST"
    refused = httpx2.ConnectError("All connection attempts failed", request=request)
    assert classify(refused) == "CONNECT_FAILED"
    assert classify(httpx2.ReadError("reset", request=request)) == "CONNECTION_LOST"
    assert classify(TimeoutError()) == "CLIENT_TIMEOUT"
    assert classify(ExceptionGroup("task group", [TimeoutError()])) == "CLIENT_TIMEOUT"
    assert classify(ValueError("odd")) == "ValueError"
    assert {"SESSION_LOST", "CONNECTION_LOST", "SERVER_UNAVAILABLE"} <= RETRYABLE
    assert "LLM_ERROR" not in RETRYABLE


def test_an_error_result_is_known_by_its_structured_code() -> None:
    text = [TextContent(type="text", text="agent orchestrator is shutting down")]
    coded = CallToolResult(
        content=text,
        isError=True,
        structuredContent={"error": {"code": "SERVER_UNAVAILABLE", "message": "…"}},
    )
    assert error_code(coded) == "SERVER_UNAVAILABLE"
    assert error_code(CallToolResult(content=text, isError=True)) == "ERROR_RESULT"


def test_the_send_budget_is_shared_and_runs_out() -> None:
    budget = Budget(2)
    assert [budget.take(), budget.take(), budget.take()] == [True, True, False]
    assert budget.exhausted


async def test_a_turn_acknowledged_while_its_history_is_read_is_not_counted_lost() -> None:
    # The traffic goes on while histories are read back: a turn answered during the read was
    # never promised to be in it (the check compares with what was acknowledged before the read).
    caller = Caller("c00", "http://127.0.0.1:1/mcp", lambda: "token", run_id="r", delegate=False, turns=4,
                    timeout=1.0, record=lambda send: None, secret="s")  # fmt: skip
    conversation = Conversation("soak-r-c00-k1", attempts=2, acked={1: 1.0})
    stored = [Turn("c00", conversation.id, 1, "s").text()]

    async def history(conversation_id: str) -> list[str]:
        conversation.acked[2] = 2.0  # the caller's next turn is answered meanwhile
        return list(stored)

    caller._history = history  # type: ignore[method-assign]
    found = await caller.check_histories([conversation])
    assert found.lost == []
    # A turn acknowledged before the read and absent from it is lost.
    conversation.acked[3] = 3.0
    found = await caller.check_histories([conversation])
    assert [(loss.turn) for loss in found.lost] == [2, 3]
