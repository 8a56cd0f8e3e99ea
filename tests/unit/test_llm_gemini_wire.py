"""Gemini's request parameters and reply folding, as pure functions (no server)."""

from __future__ import annotations

import pytest

from pallas_api.fields import ModelCapabilities, RequestParams
from pallas_runtime.llm.gemini_request import gemini_plan
from pallas_runtime.llm.gemini_response import GeminiStreamReader, completion_from_gemini
from pallas_runtime.llm.params import ParamsNotTaken, check_call_params
from pallas_runtime.messages import ToolCall

CAPS = ModelCapabilities(max_output_tokens=1000)


def test_sampling_and_limits_go_in_generation_config_and_tool_choice_in_tool_config():
    params = RequestParams.model_validate(
        {"temperature": 0.2, "topP": 0.9, "topK": 40, "maxTokens": 5000, "stop": ["END"], "seed": 7,
         "effort": "low", "responseFormat": {"type": "json_object"}, "toolChoice": "w__f"}
    )  # fmt: skip
    plan = gemini_plan(params, model="gemini-3-pro-preview", capabilities=CAPS, subject="gemini")
    assert plan.wire_fields() == {
        "generationConfig": {
            "temperature": 0.2, "topP": 0.9, "topK": 40, "seed": 7, "maxOutputTokens": 1000,
            "stopSequences": ["END"], "thinkingConfig": {"thinkingLevel": "low"},
            "responseMimeType": "application/json",
        },
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["w__f"]}},
    }  # fmt: skip
    assert "toolConfig" not in plan.wire_fields(with_tools=False)
    assert plan.adjusted


def test_effort_is_gemini_3s_thinking_level_and_refused_or_dropped_otherwise():
    medium = RequestParams(effort="medium")
    with pytest.raises(ParamsNotTaken, match="effort 'medium': gemini takes low, high"):
        check_call_params(
            gemini_plan(medium, model="gemini-3-pro-preview", capabilities=CAPS, subject="gemini"), "g"
        )
    older = gemini_plan(RequestParams(effort="low"), model="gemini-2.5-flash", capabilities=CAPS, subject="g")
    assert older.dropped == ("effort",)


def test_a_stream_keeps_the_signatures_of_calls_and_of_text_arriving_last():
    reader = GeminiStreamReader()
    part = {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "sig-call"}
    chunks = [
        {"candidates": [{"content": {"parts": [{"text": "thinking", "thought": True}]}}]},
        {"candidates": [{"content": {"parts": [{"text": "Hel"}]}}]},
        {"candidates": [{"content": {"parts": [{"text": "lo"}, part]}}]},
        {"candidates": [{"content": {"parts": [{"text": "", "thoughtSignature": "sig-text"}]},
                         "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 4}},
    ]  # fmt: skip
    assert [reader.feed(c) for c in chunks] == ["", "Hel", "lo", ""]
    completion = completion_from_gemini(reader.body())
    assert completion.text == "Hello"
    assert completion.signature == "sig-text"
    assert completion.tool_calls == (ToolCall("gemini-call-1", "f", {"a": 1}, None, "sig-call"),)
    assert completion.usage.input == 4
