"""What the LLM adapter tests send: a greeting, a tool to offer and a tiny picture."""

from __future__ import annotations

from pallas_runtime.messages import ImagePart, TextPart, ToolSpec, UserMessage

PNG = ImagePart(data="iVBORw0KGgo=", mime_type="image/png")
SEARCH = ToolSpec(
    "web__search", "Search the web", {"type": "object", "properties": {"q": {"type": "string"}}}
)
HI = [UserMessage((TextPart("hi"),))]
