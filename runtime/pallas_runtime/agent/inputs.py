"""Validation of what one `send_message` carries; each problem is one clear sentence."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from pallas_api.config import AgentConfig, SendParams
from pallas_runtime.messages import AssistantMessage, ContentPart, ImagePart, Message, TextPart, UserMessage

# File signatures, so a mislabelled or corrupt image is refused here rather than by the provider
# halfway through a turn.
_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
}


class ImageInput(BaseModel):
    """An image attached to a message: base64 data and its MIME type."""

    model_config = ConfigDict(extra="forbid")

    data: str
    mime_type: str


class InvalidInput(ValueError):
    """The message or its images break the agent's limits."""


def _matches_type(raw: bytes, mime_type: str) -> bool:
    if mime_type == "image/webp":
        return raw[:4] == b"RIFF" and raw[8:12] == b"WEBP"
    signatures = _SIGNATURES.get(mime_type)
    return signatures is None or raw.startswith(signatures)


def user_message(
    config: AgentConfig, message: str, images: Sequence[ImageInput] | None, *, model: str | None = None
) -> UserMessage:
    """Check the inputs against the agent's limits and capabilities and build the user turn.

    Args:
        config: The agent's config.
        message: The user's text.
        images: The attached images.
        model: The model the call picks (`params.model`); images are checked against its
            capabilities, not the agent's own model's. One the agent does not offer is checked
            as the agent's own (the choice itself is refused by `turn_choice`).

    Raises:
        InvalidInput: naming the first problem found.
    """
    limits = config.limits
    if not message.strip():
        raise InvalidInput("message is empty")
    size = len(message.encode("utf-8"))
    if size > limits.max_message_bytes:
        raise InvalidInput(f"message is {size} bytes; the limit is {limits.max_message_bytes}")
    parts: list[ContentPart] = [TextPart(message)]
    images = images or []
    option = config.model_option(model) if model is not None else None
    chosen, capabilities = (
        (option.model, option.capabilities) if option else (config.model, config.capabilities)
    )
    if images and not capabilities.vision:
        raise InvalidInput(f"model {chosen!r} does not accept images (its capabilities say vision: false)")
    if len(images) > limits.max_images:
        raise InvalidInput(f"{len(images)} images attached; the limit is {limits.max_images}")
    for index, image in enumerate(images):
        where = f"images[{index}]"
        if image.mime_type not in limits.image_types:
            raise InvalidInput(
                f"{where}: unsupported type {image.mime_type!r}; accepted: {', '.join(limits.image_types)}"
            )
        if image.data.startswith("data:"):
            raise InvalidInput(f"{where}: data must be plain base64, without a data: URI prefix")
        try:
            raw = base64.b64decode(image.data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"{where}: data is not valid base64") from None
        if not raw:
            raise InvalidInput(f"{where}: data is empty")
        if len(raw) > limits.max_image_bytes:
            raise InvalidInput(f"{where}: image is {len(raw)} bytes; the limit is {limits.max_image_bytes}")
        if not _matches_type(raw, image.mime_type):
            raise InvalidInput(f"{where}: data is not a {image.mime_type} image")
        parts.append(ImagePart(image.data, image.mime_type))
    return UserMessage(tuple(parts))


def given_history(params: SendParams | None, conversation_id: str | None) -> list[Message] | None:
    """The history a call brings in `params.messages`, as the turn's messages (None: none brought).

    Raises:
        InvalidInput: the call names a conversation too (a history given replaces the stored one,
            so there is nothing of a conversation to read or keep).
    """
    if params is None or params.messages is None:
        return None
    if conversation_id is not None:
        raise InvalidInput(
            "params.messages replaces a conversation's history: send it without conversation_id"
        )
    return [
        UserMessage((TextPart(m.text),)) if m.role == "user" else AssistantMessage(m.text)
        for m in params.messages
    ]
