"""The structured part of an agent's tool errors."""

from __future__ import annotations

import pytest

from pallas_api.errors import ErrorCode, error_code_of, error_content


def test_error_content_round_trips_its_code() -> None:
    content = error_content(ErrorCode.LLM_ERROR, "the language model call failed: HTTP 503")
    message = "the language model call failed: HTTP 503"
    assert content == {"error": {"code": "LLM_ERROR", "message": message, "retryable": False}}
    assert error_code_of(content) is ErrorCode.LLM_ERROR


@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        (ErrorCode.AGENT_SHUTTING_DOWN, True),  # another replica, or the agent once back, takes it
        (ErrorCode.SERVER_UNAVAILABLE, True),
        (ErrorCode.TIMEOUT, True),
        (ErrorCode.INVALID_ARGUMENTS, False),  # the same call fails the same way
        (ErrorCode.LLM_ERROR, False),  # the SDK already retried
        (ErrorCode.MAX_ITERATIONS, False),
        (ErrorCode.BUDGET_EXCEEDED, False),  # not before the window resets
    ],
)
def test_errors_say_whether_the_same_call_may_succeed_again(code: ErrorCode, retryable: bool) -> None:
    assert error_content(code, "x")["error"]["retryable"] is retryable


@pytest.mark.parametrize(
    "structured",
    [None, "LLM_ERROR", {}, {"error": "x"}, {"error": {"code": 7}}, {"error": {"code": "NEW_KIND"}}],
)
def test_an_unknown_or_missing_code_reads_as_none(structured: object) -> None:
    assert error_code_of(structured) is None
