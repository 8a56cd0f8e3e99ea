"""The structured part of an agent's tool errors."""

from __future__ import annotations

import pytest

from pallas_api.errors import ErrorCode, error_code_of, error_content


def test_error_content_round_trips_its_code() -> None:
    content = error_content(ErrorCode.LLM_ERROR, "the language model call failed: HTTP 503")
    assert content == {"error": {"code": "LLM_ERROR", "message": "the language model call failed: HTTP 503"}}
    assert error_code_of(content) is ErrorCode.LLM_ERROR


@pytest.mark.parametrize(
    "structured",
    [None, "LLM_ERROR", {}, {"error": "x"}, {"error": {"code": 7}}, {"error": {"code": "NEW_KIND"}}],
)
def test_an_unknown_or_missing_code_reads_as_none(structured: object) -> None:
    assert error_code_of(structured) is None
