"""Provider translation both ways and the parameter matrix: pure functions, no HTTP."""

from __future__ import annotations

import json

import pytest

from pallas_api.config import parse_config
from pallas_api.fields import ModelCapabilities, RequestParams
from pallas_runtime.llm.adapter import parse_arguments
from pallas_runtime.llm.anthropic_messages import (
    AnthropicMessagesProvider,
    completion_from_messages,
    messages_blocks,
    messages_tools,
    usage_from_messages,
)
from pallas_runtime.llm.factory import NO_KEY_PLACEHOLDER, create_provider, resolve_api_key
from pallas_runtime.llm.openai_chat import (
    OpenAIChatProvider,
    chat_messages,
    chat_tools,
    completion_from_chat,
    usage_from_chat,
)
from pallas_runtime.llm.params import (
    ParamsNotTaken,
    anthropic_plan,
    anthropic_rule,
    check_call_params,
    dropped_warning,
    is_native_openai,
    merge_params,
    openai_plan,
    responses_plan,
)
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    Usage,
    UserMessage,
)
from tests.support.llm_inputs import PNG, SEARCH

JPEG = ImagePart(data="/9j/4AAQ", mime_type="image/jpeg")


def user(*parts):
    return UserMessage(tuple(TextPart(p) if isinstance(p, str) else p for p in parts))


def results(*items):
    return ToolResultsMessage(tuple(items))


def result(call_id, name, *parts, is_error=False):
    content = tuple(TextPart(p) if isinstance(p, str) else p for p in parts)
    return ToolResult(call_id, name, content, is_error)


def agent(provider_type="openai", **overrides):
    data = {"name": "a", "model": "m", "provider": {"name": "p", "type": provider_type}}
    data.update(overrides)
    return parse_config(data)


# --- OpenAI Chat Completions: request -------------------------------------------------------


def test_chat_messages_put_the_system_prompt_first_and_plain_text_as_a_string():
    assert chat_messages("Be brief.", [user("hi")]) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_chat_messages_leave_out_an_empty_system_prompt():
    assert chat_messages("", [user("hi")]) == [{"role": "user", "content": "hi"}]


def test_chat_user_images_become_data_url_parts():
    [message] = chat_messages("", [user("what is this?", PNG)])
    assert message == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    }


def test_chat_assistant_tool_calls_carry_json_string_arguments():
    call = ToolCall("call_1", "web__search", {"q": "pallas"})
    [message] = chat_messages("", [AssistantMessage("", (call,))])
    assert message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "web__search", "arguments": '{"q": "pallas"}'},
            }
        ],
    }
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"q": "pallas"}


def test_chat_assistant_text_only():
    assert chat_messages("", [AssistantMessage("done")]) == [{"role": "assistant", "content": "done"}]
    assert chat_messages("", [AssistantMessage("")]) == [{"role": "assistant", "content": ""}]


def test_chat_tool_results_are_tool_messages_in_call_order():
    wire = chat_messages(
        "",
        [results(result("c1", "web__search", "found it"), result("c2", "db__query", "boom", is_error=True))],
    )
    assert wire == [
        {"role": "tool", "tool_call_id": "c1", "content": "found it"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: boom"},
    ]


def test_chat_tool_result_images_follow_in_one_user_message_naming_the_tool():
    wire = chat_messages(
        "",
        [
            results(
                result("c1", "cam__snap", "two shots", PNG, JPEG), result("c2", "web__search", "text only")
            )
        ],
    )
    assert [m["role"] for m in wire] == ["tool", "tool", "user"]
    assert wire[0]["tool_call_id"] == "c1"
    assert wire[0]["content"].startswith("two shots\n")
    assert "2 image(s)" in wire[0]["content"]
    assert wire[1] == {"role": "tool", "tool_call_id": "c2", "content": "text only"}
    images = wire[2]["content"]
    assert images[0] == {"type": "text", "text": "Images returned by tool cam__snap (call c1):"}
    assert images[1:] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
    ]


def test_chat_tools_are_function_tools():
    assert chat_tools([SEARCH]) == [
        {
            "type": "function",
            "function": {
                "name": "web__search",
                "description": "Search the web",
                "parameters": SEARCH.input_schema,
            },
        }
    ]
    assert chat_tools([]) == []


# --- OpenAI Chat Completions: response ------------------------------------------------------


def chat_response(message, finish_reason="stop", usage=None):
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def test_completion_from_chat_text():
    completion = completion_from_chat(chat_response({"content": "hello"}))
    assert completion.text == "hello"
    assert completion.tool_calls == ()
    assert completion.stop_reason == "stop"
    assert completion.usage == Usage()


def test_completion_from_chat_concatenates_content_parts():
    content = [
        {"type": "text", "text": "hel"},
        {"type": "refusal", "refusal": "x"},
        {"type": "text", "text": "lo"},
    ]
    assert completion_from_chat(chat_response({"content": content})).text == "hello"


def test_completion_from_chat_tool_calls_good_and_malformed():
    calls = [
        {"id": "a", "type": "function", "function": {"name": "web__search", "arguments": '{"q": "x"}'}},
        {"id": "b", "type": "function", "function": {"name": "web__search", "arguments": '{"q": '}},
        {"id": "c", "type": "function", "function": {"name": "web__search", "arguments": "[1, 2]"}},
        {"id": "d", "type": "function", "function": {"name": "clock__now", "arguments": ""}},
    ]
    completion = completion_from_chat(chat_response({"content": None, "tool_calls": calls}, "tool_calls"))
    assert completion.text == ""
    assert completion.stop_reason == "tool_calls"
    good, not_json, not_object, empty = completion.tool_calls
    assert good == ToolCall("a", "web__search", {"q": "x"})
    assert not_json.arguments == {}
    assert "not valid JSON" in (not_json.arguments_error or "")
    assert not_object.arguments == {}
    assert not_object.arguments_error == "arguments must be a JSON object, got list"
    assert empty == ToolCall("d", "clock__now", {})


def test_completion_from_chat_fills_in_a_missing_call_id():
    calls = [{"type": "function", "function": {"name": "t", "arguments": "{}"}}]
    [call] = completion_from_chat(chat_response({"tool_calls": calls}, "tool_calls")).tool_calls
    assert call.id == "call_0"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": 1}', ({"a": 1}, None)),
        ({"a": 1}, ({"a": 1}, None)),
        (None, ({}, None)),
        ("  ", ({}, None)),
        ('"text"', ({}, "arguments must be a JSON object, got str")),
        ("null", ({}, "arguments must be a JSON object, got NoneType")),
    ],
)
def test_parse_arguments(raw, expected):
    assert parse_arguments(raw) == expected


def test_completion_from_chat_without_choices_is_an_error():
    with pytest.raises(ValueError, match="no choices"):
        completion_from_chat({"object": "chat.completion", "choices": []})


def test_chat_usage_splits_cached_prompt_tokens_out_of_input():
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "total_tokens": 140,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 25},
    }
    assert usage_from_chat(usage) == Usage(input=70, output=40, cache_read=30, cache_write=0, reasoning=25)


def test_chat_usage_counts_cache_hits_a_server_reports_by_that_name():
    """DeepSeek's usage: the hits are part of prompt_tokens, reported beside the misses."""
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "prompt_cache_hit_tokens": 64,
        "prompt_cache_miss_tokens": 36,
    }
    assert usage_from_chat(usage) == Usage(input=36, output=10, cache_hit=64)
    assert usage_from_chat(usage).by_kind()["cache_hit"] == 64
    # Reported both ways, the tokens are counted once, as cache reads.
    both = {**usage, "prompt_tokens_details": {"cached_tokens": 64}}
    assert usage_from_chat(both) == Usage(input=36, output=10, cache_read=64)


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "total_tokens": 15,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
        {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": None},
            "completion_tokens_details": {},
        },
    ],
    ids=["llama.cpp-no-details", "null-details", "null-counts"],
)
def test_chat_usage_tolerates_missing_details(usage):
    assert usage_from_chat(usage) == Usage(input=12, output=3)


def test_chat_usage_absent():
    assert usage_from_chat(None) == Usage()


# --- Anthropic Messages: request ------------------------------------------------------------


def test_messages_user_text_and_base64_image_blocks():
    assert messages_blocks([user("look", PNG)]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        }
    ]


def test_messages_assistant_text_and_tool_use_blocks():
    message = AssistantMessage("Let me look.", (ToolCall("toolu_1", "web__search", {"q": "x"}),))
    assert messages_blocks([message]) == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "web__search", "input": {"q": "x"}},
            ],
        }
    ]


def test_messages_tool_results_are_one_user_message_of_tool_result_blocks():
    wire = messages_blocks(
        [
            results(
                result("toolu_1", "cam__snap", "a photo", JPEG),
                result("toolu_2", "db__query", "no such table", is_error=True),
            )
        ]
    )
    assert wire == [
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "a photo"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"},
                        },
                    ],
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "no such table"}],
                    "is_error": True,
                },
            ],
        }
    ]


def test_messages_merge_consecutive_same_role_messages():
    call = ToolCall("toolu_1", "t", {})
    wire = messages_blocks(
        [
            user("first"),
            user("second"),
            AssistantMessage("thinking aloud"),
            AssistantMessage("", (call,)),
            results(result("toolu_1", "t", "ok")),
            user("and now?"),
            AssistantMessage(""),
        ]
    )
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert [b["text"] for b in wire[0]["content"]] == ["first", "second"]
    assert [b["type"] for b in wire[1]["content"]] == ["text", "tool_use"]
    # tool_result blocks must open the user turn that answers the tool_use
    assert [b["type"] for b in wire[2]["content"]] == ["tool_result", "text"]


def test_messages_tools_use_input_schema():
    assert messages_tools([SEARCH]) == [
        {"name": "web__search", "description": "Search the web", "input_schema": SEARCH.input_schema}
    ]


# --- Anthropic Messages: response -----------------------------------------------------------


def messages_response(content, stop_reason="end_turn", usage=None):
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": content,
        "stop_reason": stop_reason,
        "usage": usage or {"input_tokens": 1, "output_tokens": 1},
    }


def test_completion_from_messages_concatenates_text_and_skips_other_blocks():
    content = [
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "text", "text": "Hello, "},
        {"type": "text", "text": "world."},
    ]
    completion = completion_from_messages(messages_response(content))
    assert completion.text == "Hello, world."
    assert completion.stop_reason == "end_turn"


def test_completion_from_messages_tool_use_good_and_malformed():
    content = [
        {"type": "text", "text": "Searching."},
        {"type": "tool_use", "id": "toolu_1", "name": "web__search", "input": {"q": "x"}},
        {"type": "tool_use", "id": "toolu_2", "name": "web__search", "input": "{not json"},
        {"type": "tool_use", "id": "toolu_3", "name": "web__search", "input": [1]},
        {"type": "tool_use", "id": "toolu_4", "name": "web__search", "input": '{"q": "as a string"}'},
    ]
    completion = completion_from_messages(messages_response(content, "tool_use"))
    assert completion.text == "Searching."
    assert completion.stop_reason == "tool_use"
    good, not_json, not_object, stringly = completion.tool_calls
    assert good == ToolCall("toolu_1", "web__search", {"q": "x"})
    assert not_json.arguments == {}
    assert "not valid JSON" in (not_json.arguments_error or "")
    assert not_object.arguments_error == "arguments must be a JSON object, got list"
    assert stringly == ToolCall("toolu_4", "web__search", {"q": "as a string"})


def test_completion_from_messages_without_content_is_an_error():
    with pytest.raises(ValueError, match="no content"):
        completion_from_messages({"type": "message"})


def test_messages_usage_maps_cache_fields():
    usage = {
        "input_tokens": 50,
        "output_tokens": 20,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 300,
    }
    assert usage_from_messages(usage) == Usage(input=50, output=20, cache_read=1000, cache_write=300)
    nulls = {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": None}
    assert usage_from_messages(nulls) == Usage(input=5, output=2)
    assert usage_from_messages(None) == Usage()


# --- the parameter matrix -------------------------------------------------------------------

ALL = RequestParams(
    temperature=0.6, top_p=0.9, top_k=40, max_tokens=4096, stop=["</done>"], seed=7, effort="high"
)
CAPS = ModelCapabilities()
NEWER = RequestParams.model_validate(
    {
        "presencePenalty": 0.5,
        "frequencyPenalty": -0.5,
        "responseFormat": {
            "type": "json_schema",
            "jsonSchema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
        },
        "toolChoice": "argos__search",
        "extra": {"repetition_penalty": 1.1},
    }
)  # fmt: skip


@pytest.mark.parametrize(
    ("base_url", "native"),
    [
        (None, True),
        ("https://api.openai.com/v1", True),
        ("https://us.api.openai.com/v1", True),
        ("http://vllm.models.svc:8000/v1", False),
        ("http://127.0.0.1:8080/v1", False),
        ("https://api.openai.com.example.org/v1", False),
    ],
)
def test_is_native_openai(base_url, native):
    assert is_native_openai(base_url) is native


def test_openai_native_drops_top_k_and_uses_max_completion_tokens():
    plan = openai_plan(ALL, native=True, capabilities=CAPS)
    assert plan.kwargs == {
        "temperature": 0.6,
        "top_p": 0.9,
        "max_completion_tokens": 4096,
        "stop": ["</done>"],
        "seed": 7,
        "reasoning_effort": "high",
    }
    assert plan.extra_body == {}
    # The seed: "top_k: Anthropic-only; OpenAI ignores": not sent, warned about, never refused.
    assert plan.dropped == ()
    assert plan.ignored == ("topK",)


def test_openai_compatible_sends_top_k_in_extra_body_and_max_tokens():
    plan = openai_plan(ALL, native=False, capabilities=CAPS)
    assert plan.extra_body == {"top_k": 40}
    assert plan.kwargs["max_tokens"] == 4096
    assert "max_completion_tokens" not in plan.kwargs
    assert plan.kwargs["reasoning_effort"] == "high"
    assert plan.dropped == ()


def test_openai_unset_params_send_nothing():
    assert openai_plan(RequestParams(), native=True, capabilities=CAPS).wire_fields() == {}


def test_anthropic_default_model_takes_sampling_but_not_seed_or_effort():
    plan = anthropic_plan(ALL, model="claude-sonnet-4-5", capabilities=ModelCapabilities())
    assert plan.kwargs == {"max_tokens": 4096, "stop_sequences": ["</done>"]}
    assert plan.extra_body == {"temperature": 0.6, "top_p": 0.9, "top_k": 40}
    assert plan.dropped == ("seed", "effort")


def test_anthropic_opus_4_7_takes_effort_and_no_sampling():
    plan = anthropic_plan(ALL, model="claude-opus-4-7", capabilities=ModelCapabilities())
    assert plan.kwargs == {
        "max_tokens": 4096,
        "stop_sequences": ["</done>"],
        "output_config": {"effort": "high"},
    }
    assert plan.extra_body == {}
    assert plan.dropped == ("temperature", "topP", "topK", "seed")


def test_anthropic_max_tokens_defaults_to_the_model_capability():
    plan = anthropic_plan(
        RequestParams(), model="claude-haiku-4-5", capabilities=ModelCapabilities(max_output_tokens=999)
    )
    assert plan.wire_fields() == {"max_tokens": 999}
    assert plan.dropped == ()


def test_openai_takes_penalties_response_format_tool_choice_and_extra_fields():
    plan = openai_plan(NEWER, native=False, capabilities=CAPS)
    assert plan.wire_fields() == {
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
        },
        "tool_choice": {"type": "function", "function": {"name": "argos__search"}},
        "repetition_penalty": 1.1,
    }
    assert plan.dropped == ()
    assert "tool_choice" not in plan.wire_fields(with_tools=False)  # both APIs refuse it without tools
    for choice in ("auto", "none", "required"):
        assert openai_plan(RequestParams(tool_choice=choice), native=True, capabilities=CAPS).kwargs == {
            "tool_choice": choice
        }


def test_openai_clamps_max_tokens_to_the_model_and_stop_to_four_on_openai_only():
    many = RequestParams(max_tokens=100_000, stop=["a", "b", "c", "d", "e", "f"])
    caps = ModelCapabilities(max_output_tokens=8192)
    native = openai_plan(many, native=True, capabilities=caps)
    compatible = openai_plan(many, native=False, capabilities=caps)
    assert native.kwargs == {"max_completion_tokens": 8192, "stop": ["a", "b", "c", "d"]}
    assert compatible.kwargs == {"max_tokens": 8192, "stop": ["a", "b", "c", "d", "e", "f"]}
    warning = dropped_warning(native, "openai provider 'o'")
    assert warning == (
        "openai provider 'o': maxTokens 100000 is above the model's maxOutputTokens; sending 8192; "
        "openai provider 'o': stop has 6 sequences; OpenAI takes 4, the first are sent"
    )


def test_anthropic_maps_tool_choice_and_extra_and_drops_what_it_does_not_take():
    plan = anthropic_plan(
        NEWER, model="claude-sonnet-4-5", capabilities=ModelCapabilities(max_output_tokens=500)
    )
    assert plan.wire_fields() == {
        "max_tokens": 500,
        "tool_choice": {"type": "tool", "name": "argos__search"},
        "repetition_penalty": 1.1,
    }
    assert plan.dropped == ("presencePenalty", "frequencyPenalty", "responseFormat")
    choices = {c: anthropic_plan(RequestParams(tool_choice=c), model="claude-sonnet-4-5", capabilities=CAPS)
               for c in ("auto", "none", "required")}  # fmt: skip
    assert {c: p.kwargs["tool_choice"] for c, p in choices.items()} == {
        "auto": {"type": "auto"},
        "none": {"type": "none"},
        "required": {"type": "any"},
    }
    text_only = RequestParams.model_validate({"responseFormat": {"type": "text"}, "maxTokens": 10**6})
    plan = anthropic_plan(text_only, model="claude-sonnet-4-5", capabilities=ModelCapabilities())
    assert (plan.wire_fields(), plan.dropped) == ({"max_tokens": 16384}, ())


def test_a_calls_params_override_the_agents_and_null_clears_one():
    defaults = RequestParams(temperature=0.6, max_tokens=4096, seed=7)
    call = RequestParams.model_validate({"temperature": 0.1, "maxTokens": None, "toolChoice": "none"})
    merged = merge_params(defaults, call)
    assert (merged.temperature, merged.max_tokens, merged.seed, merged.tool_choice) == (0.1, None, 7, "none")
    assert merge_params(defaults, None) is defaults
    assert merge_params(defaults, RequestParams()) is defaults


def test_a_calls_extra_changes_only_the_provider_fields_it_names():
    defaults = RequestParams(extra={"store": False, "metadata": {"team": "r"}})
    call = RequestParams(extra={"repetition_penalty": 1.1, "metadata": None})
    assert merge_params(defaults, call).extra == {"store": False, "repetition_penalty": 1.1}
    assert merge_params(defaults, RequestParams(extra=None)).extra == defaults.extra


def test_a_calls_params_the_provider_does_not_take_are_an_error():
    call = RequestParams.model_validate({"presencePenalty": 0.5, "seed": 1, "temperature": 0.2})
    plan = anthropic_plan(call, model="claude-sonnet-4-5", capabilities=CAPS)
    with pytest.raises(ParamsNotTaken) as refused:
        check_call_params(plan, "anthropic provider 'claude' (model claude-sonnet-4-5)")
    assert str(refused.value) == (
        "params.seed, params.presencePenalty: "
        "anthropic provider 'claude' (model claude-sonnet-4-5) does not take them"
    )
    check_call_params(openai_plan(call, native=False, capabilities=CAPS), "x")  # all taken: no error


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"responseFormat": {"type": "json_schema"}}, "needs jsonSchema exactly when"),
        ({"responseFormat": {"type": "text", "jsonSchema": {"name": "a", "schema": {}}}}, "needs jsonSchema"),
        ({"toolChoice": "search"}, "should match pattern"),
        ({"extra": {"temperature": 1, "model": "x"}}, "extra may not set model, temperature"),
        ({"presencePenalty": 3}, "less than or equal to 2"),
    ],
)
def test_request_params_refuse_what_no_provider_could_send(data, problem):
    with pytest.raises(ValueError, match=problem):
        RequestParams.model_validate(data)


@pytest.mark.parametrize(
    ("model", "sampling", "effort"),
    [
        ("claude-opus-4-7", False, True),
        ("claude-opus-4-7-20260416", False, True),
        ("anthropic.claude-opus-4-7-v1:0", False, True),
        ("claude-opus-4-6", True, True),
        ("claude-sonnet-4-6", True, True),
        ("claude-opus-4-5-20251101", True, True),
        ("claude-sonnet-4-5", True, False),
        ("claude-haiku-4-5", True, False),
        ("my-claude-opus-4-7-finetune", True, False),
    ],
)
def test_anthropic_rules_match_families(model, sampling, effort):
    rule = anthropic_rule(model)
    assert (rule.sampling, rule.effort) == (sampling, effort)


def test_dropped_warning_names_params_and_provider():
    plan = anthropic_plan(ALL, model="claude-opus-4-7", capabilities=ModelCapabilities())
    text = dropped_warning(plan, "anthropic provider 'claude'")
    assert text == "anthropic provider 'claude' does not take temperature, topP, topK, seed; dropping them"
    assert dropped_warning(openai_plan(RequestParams(), native=True, capabilities=CAPS), "x") is None


# --- factory --------------------------------------------------------------------------------


async def test_factory_picks_the_adapter_by_type():
    chat = create_provider(agent("openai"), {})
    claude = create_provider(agent("anthropic"), {})
    assert isinstance(chat, OpenAIChatProvider)
    assert isinstance(claude, AnthropicMessagesProvider)
    assert (chat.name, chat.model) == ("p", "m")
    await chat.aclose()
    await claude.aclose()


def test_resolve_api_key(monkeypatch):
    keyless = agent().provider
    keyed = agent(provider={"name": "p", "type": "openai", "apiKeyEnv": "VLLM_KEY"}).provider
    assert resolve_api_key(keyless, {}) == NO_KEY_PLACEHOLDER
    assert resolve_api_key(keyed, {"VLLM_KEY": "k1"}) == "k1"
    assert resolve_api_key(keyed, {"VLLM_KEY": ""}) is None
    assert resolve_api_key(keyed, {}) is None
    monkeypatch.setenv("VLLM_KEY", "from-process")
    assert resolve_api_key(keyed) == "from-process"


@pytest.mark.parametrize("provider_type", ["openai", "anthropic"])
async def test_missing_key_constructs_and_reports_it(provider_type):
    config = agent(provider={"name": "vllm", "type": provider_type, "apiKeyEnv": "VLLM_KEY"})
    provider = create_provider(config, {})
    expected = f"{provider_type} provider 'vllm': no API key: environment variable VLLM_KEY is not set"
    check = await provider.preflight()
    assert (check.ok, check.message) == (False, expected)
    with pytest.raises(LLMError, match=expected) as raised:
        await provider.complete(system="", messages=[user("hi")], tools=[])
    assert raised.value.status is None
    await provider.aclose()


def test_responses_plan_sends_top_k_to_every_server_but_openais_own():
    compatible = responses_plan(RequestParams(top_k=40), native=False, capabilities=CAPS)
    assert compatible.wire_fields() == {"top_k": 40}
    assert (compatible.dropped, compatible.ignored) == ((), ())
    native = responses_plan(RequestParams(top_k=40), native=True, capabilities=CAPS)
    assert native.wire_fields() == {}
    assert (native.dropped, native.ignored) == ((), ("topK",))
    assert (
        dropped_warning(native, "openai provider 'oai'")
        == "openai provider 'oai' ignores topK; not sending it"
    )
    check_call_params(native, "openai provider 'oai'")  # ignored, not refused
