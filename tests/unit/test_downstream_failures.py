"""Which downstream failures a request may be sent again after (`failures.retry_pause`)."""

from __future__ import annotations

import httpx2
import mcp_types
import pytest
from mcp import MCPError

from pallas_api.errors import DRAINING_RPC_CODE
from pallas_runtime.downstream.failures import (
    MAX_RETRY_PAUSE,
    CallNotProcessed,
    HttpErrorRecorder,
    classify,
    describe_failure,
    retry_pause,
)


def error(code: int, message: str, data: object = None) -> MCPError:
    return MCPError.from_error_data(mcp_types.ErrorData(code=code, message=message, data=data))


def gone_recorder() -> HttpErrorRecorder:
    recorder = HttpErrorRecorder()
    recorder.session_gone = True
    recorder.last_status = 404
    return recorder


def test_a_session_the_server_no_longer_has_is_retried_at_once():
    assert retry_pause(error(mcp_types.INVALID_REQUEST, "Session terminated")) == 0.0
    # However the server words its 404 body: the recorder saw our session id refused.
    assert retry_pause(error(mcp_types.INVALID_REQUEST, "no such session"), gone_recorder()) == 0.0


@pytest.mark.parametrize(
    ("data", "pause"),
    [
        ({"code": "AGENT_SHUTTING_DOWN", "retryAfterSeconds": 1}, 1.0),
        ({"code": "AGENT_SHUTTING_DOWN", "retryAfterSeconds": 0.25}, 0.25),
        ({"code": "AGENT_SHUTTING_DOWN", "retryAfterSeconds": 3600}, MAX_RETRY_PAUSE),
        ({"code": "AGENT_SHUTTING_DOWN", "retryAfterSeconds": -5}, MAX_RETRY_PAUSE),
        ({"code": "AGENT_SHUTTING_DOWN", "retryAfterSeconds": "soon"}, MAX_RETRY_PAUSE),
        (None, MAX_RETRY_PAUSE),
    ],
)
def test_a_draining_agents_refusal_is_retried_after_the_pause_it_asks_for_capped(data, pause):
    refusal = error(DRAINING_RPC_CODE, "agent a is shutting down", data)
    assert retry_pause(refusal) == pause
    assert describe_failure(refusal) == "the server is shutting down and takes no new sessions"


def test_a_call_a_stopping_agent_ran_none_of_is_retried_at_once_on_another_session():
    refused = CallNotProcessed(mcp_types.CallToolResult(content=[], is_error=True))
    assert retry_pause(refused) == 0.0
    assert classify(refused) == "session_gone"  # its session is on a replica that is stopping
    assert describe_failure(refused) == "the agent is stopping and did not process the call"


@pytest.mark.parametrize(
    "failure",
    [
        error(mcp_types.INTERNAL_ERROR, "Server returned an error response"),  # a 500: it may have run
        error(mcp_types.METHOD_NOT_FOUND, "Not Found"),  # a 404 before any session: wrong URL
        error(mcp_types.CONNECTION_CLOSED, "Connection closed"),  # dropped mid-call
        error(mcp_types.REQUEST_TIMEOUT, "timed out"),
        error(-32602, "Invalid params"),
        httpx2.ReadError("reset"),
        OSError("broken pipe"),
        ExceptionGroup("task group", [httpx2.ReadError("reset")]),
    ],
)
def test_a_failure_that_may_have_run_the_request_is_not_retried(failure):
    assert retry_pause(failure) is None
