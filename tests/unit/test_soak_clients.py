"""What the soak's callers make of errors (tests/support/soak/clients.py): a code per failure,
the retryable ones told apart, and a bounded number of sends."""

from __future__ import annotations

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from tests.support.soak.clients import RETRYABLE, Budget, classify, error_code


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
