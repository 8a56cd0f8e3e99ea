"""The structured part of an agent's tool errors."""

from __future__ import annotations

import pytest

from pallas_api.errors import ErrorCode, error_code_of, error_content, unprocessed


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


def test_a_refusal_before_anything_ran_says_so_and_only_then() -> None:
    refused = error_content(ErrorCode.AGENT_SHUTTING_DOWN, "x", processed=False)
    assert refused["error"]["processed"] is False
    assert unprocessed(refused)
    interrupted = error_content(ErrorCode.AGENT_SHUTTING_DOWN, "x")
    assert "processed" not in interrupted["error"]
    assert not unprocessed(interrupted)


@pytest.mark.parametrize(
    "structured", [None, {}, {"error": "x"}, {"error": {"processed": None}}, {"error": {"processed": 0}}]
)
def test_only_an_explicit_false_reads_as_unprocessed(structured: object) -> None:
    assert not unprocessed(structured)
