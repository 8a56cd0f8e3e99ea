"""The structured part of an agent's tool errors."""

from __future__ import annotations

import pytest

from pallas_api.errors import CATEGORIES, ErrorCode, error_code_of, error_content, unprocessed


def test_error_content_round_trips_its_code() -> None:
    content = error_content(ErrorCode.LLM_ERROR, "the language model call failed: HTTP 503")
    message = "the language model call failed: HTTP 503"
    assert content == {
        "error": {"code": "LLM_ERROR", "message": message, "retryable": False, "category": "upstream"}
    }
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


def test_every_code_has_one_of_seed_004s_categories_or_request() -> None:
    """Seed 004's BridgeError kinds (config, upstream, internal), and the caller's own (request)."""
    assert set(CATEGORIES) == set(ErrorCode)
    by_category: dict[str, set[str]] = {}
    for code in ErrorCode:
        by_category.setdefault(error_content(code, "x")["error"]["category"], set()).add(code.value)
    assert by_category["request"] >= {"INVALID_ARGUMENTS", "TOOL_NOT_FOUND"}  # the call's own fault
    assert by_category["config"] >= {"DENIED_BY_POLICY", "BUDGET_EXCEEDED"}  # the deployment refuses it
    assert by_category["upstream"] >= {"LLM_ERROR", "SERVER_UNAVAILABLE", "NOT_FOUND"}  # seed 004's
    assert by_category["internal"] == {"AGENT_SHUTTING_DOWN"}
    assert set(by_category) == {"request", "config", "upstream", "internal"}


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
