"""send_message input validation and progress formatting."""

from __future__ import annotations

import base64

import pytest

from pallas_api.config import AgentConfig, parse_config
from pallas_runtime.agent.inputs import ImageInput, InvalidInput, user_message
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\0" * 16).decode()


def config(vision: bool = True, **limits: object) -> AgentConfig:
    return parse_config(
        {
            "name": "a",
            "model": "m",
            "provider": {"name": "p", "type": "openai"},
            "capabilities": {"vision": vision},
            "limits": limits,
        }
    )


def test_a_message_with_images_becomes_one_user_turn() -> None:
    message = user_message(config(), "what is this?", [ImageInput(data=PNG, mime_type="image/png")])
    assert message.content == (TextPart("what is this?"), ImagePart(PNG, "image/png"))


@pytest.mark.parametrize(
    ("cfg", "text", "images", "error"),
    [
        (config(), "   ", None, "message is empty"),
        (config(maxMessageBytes=10), "é" * 6, None, "message is 12 bytes; the limit is 10"),
        (
            config(vision=False),
            "hi",
            [ImageInput(data=PNG, mime_type="image/png")],
            "model 'm' does not accept images (its capabilities say vision: false)",
        ),
        (
            config(maxImages=1),
            "hi",
            [ImageInput(data=PNG, mime_type="image/png")] * 2,
            "2 images attached; the limit is 1",
        ),
        (
            config(),
            "hi",
            [ImageInput(data=PNG, mime_type="image/tiff")],
            "images[0]: unsupported type 'image/tiff'; "
            "accepted: image/png, image/jpeg, image/gif, image/webp",
        ),
        (
            config(),
            "hi",
            [ImageInput(data="not base64!", mime_type="image/png")],
            "images[0]: data is not valid base64",
        ),
        (
            config(),
            "hi",
            [ImageInput(data=f"data:image/png;base64,{PNG}", mime_type="image/png")],
            "images[0]: data must be plain base64, without a data: URI prefix",
        ),
        (
            config(maxImageBytes=8),
            "hi",
            [ImageInput(data=PNG, mime_type="image/png")],
            "images[0]: image is 24 bytes; the limit is 8",
        ),
        (
            config(),
            "hi",
            [ImageInput(data=JPEG, mime_type="image/png")],
            "images[0]: data is not a image/png image",
        ),
        (config(), "hi", [ImageInput(data="", mime_type="image/png")], "images[0]: data is empty"),
    ],
)
def test_bad_input_is_named(cfg: AgentConfig, text: str, images: list[ImageInput] | None, error: str) -> None:
    with pytest.raises(InvalidInput) as exc_info:
        user_message(cfg, text, images)
    assert str(exc_info.value) == error


def turn(n: int, with_tools: bool = False) -> list[Message]:
    user = UserMessage((TextPart(f"q{n}"),))
    if not with_tools:
        return [user, AssistantMessage(f"a{n}")]
    call = ToolCall(f"c{n}", "s__t", {})
    return [
        user,
        AssistantMessage("", (call,)),
        ToolResultsMessage((ToolResult(call.id, call.name, (TextPart("r"),)),)),
        AssistantMessage(f"a{n}"),
    ]


async def test_progress_formats_follow_the_seed() -> None:
    sent: list[tuple[float, float | None, str]] = []

    async def send(progress: float, total: float | None, message: str) -> None:
        sent.append((progress, total, message))

    reporter = ProgressReporter("harper", send)
    await reporter.step("llm")
    await reporter.step("tool")
    await reporter.tool_started("argos", "search_web")
    relay = reporter.relay("research", "send_message")
    assert relay is not None
    await relay(2, None, "research step 1 (llm)")
    await reporter.tool_finished("argos", "search_web", ok=False)
    await reporter.tool_finished("research", "send_message", ok=True)
    assert sent == [
        (1, None, "harper step 1 (llm)"),
        (2, None, "harper step 2 (tool)"),
        (3, None, "argos/search_web: started"),
        (4, None, "research/send_message: research step 1 (llm)"),
        (5, None, "argos/search_web: failed"),
        (6, None, "research/send_message: completed"),
    ]


async def test_progress_is_best_effort_and_silent_without_a_token() -> None:
    async def broken(progress: float, total: float | None, message: str) -> None:
        raise ConnectionError("client went away")

    await ProgressReporter("a", broken).step("llm")  # must not raise
    silent = ProgressReporter("a", None)
    assert not silent.enabled
    assert silent.relay("s", "t") is None
    await silent.tool_started("s", "t")
