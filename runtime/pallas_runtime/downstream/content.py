"""Conversion between MCP content blocks and the runtime's ContentPart (pure, no I/O).

The model only understands text and images, so everything else a tool returns (audio, binary
resources, resource links) becomes a short text note saying what was there. Nothing is dropped
silently: a model that is told "an audio clip was returned" can say so; one that sees nothing
cannot.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import mcp_types

from pallas_runtime.messages import ContentPart, ImagePart, TextPart

if TYPE_CHECKING:
    from pallas_runtime.downstream.source import ToolOutcome

McpContent = (
    mcp_types.TextContent
    | mcp_types.ImageContent
    | mcp_types.AudioContent
    | mcp_types.ResourceLink
    | mcp_types.EmbeddedResource
)


def _size(data: str) -> str:
    """Human-readable decoded size of base64 `data` (an estimate when it is not valid base64)."""
    try:
        n = len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        n = len(data) * 3 // 4
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def _embedded(block: mcp_types.EmbeddedResource) -> ContentPart:
    resource = block.resource
    mime = resource.mime_type or "unknown type"
    if isinstance(resource, mcp_types.TextResourceContents):
        return TextPart(f"[resource {resource.uri} ({mime})]\n{resource.text}")
    if resource.mime_type is not None and resource.mime_type.startswith("image/"):
        return ImagePart(data=resource.blob, mime_type=resource.mime_type)
    return TextPart(f"[binary resource {resource.uri} ({mime}, {_size(resource.blob)}) not shown]")


def _link(block: mcp_types.ResourceLink) -> TextPart:
    details = ", ".join(x for x in (block.mime_type, block.description) if x)
    label = block.title or block.name
    return TextPart(f"[resource link: {label} <{block.uri}>{f' ({details})' if details else ''}]")


def part_from_mcp(block: McpContent) -> ContentPart:
    """One MCP content block as a ContentPart; non-text, non-image blocks become a text note."""
    if isinstance(block, mcp_types.TextContent):
        return TextPart(block.text)
    if isinstance(block, mcp_types.ImageContent):
        return ImagePart(data=block.data, mime_type=block.mime_type)
    if isinstance(block, mcp_types.AudioContent):
        return TextPart(f"[audio clip ({block.mime_type}, {_size(block.data)}) not shown]")
    if isinstance(block, mcp_types.EmbeddedResource):
        return _embedded(block)
    return _link(block)


def parts_from_mcp(blocks: Iterable[McpContent]) -> tuple[ContentPart, ...]:
    """Convert MCP content blocks in order."""
    return tuple(part_from_mcp(b) for b in blocks)


def parts_from_result(result: mcp_types.CallToolResult) -> tuple[ContentPart, ...]:
    """A tool result's content; a result with only `structured_content` becomes its JSON text.

    An empty result becomes the note `(no output)`, so the model always gets something to read.
    """
    parts = parts_from_mcp(result.content)
    if parts:
        return parts
    if result.structured_content is not None:
        return (TextPart(json.dumps(result.structured_content, ensure_ascii=False, default=str)),)
    return (TextPart("(no output)"),)


def mcp_from_part(part: ContentPart) -> mcp_types.TextContent | mcp_types.ImageContent:
    """One ContentPart as an MCP content block."""
    if isinstance(part, TextPart):
        return mcp_types.TextContent(type="text", text=part.text)
    return mcp_types.ImageContent(type="image", data=part.data, mime_type=part.mime_type)


def mcp_from_parts(parts: Sequence[ContentPart]) -> list[mcp_types.TextContent | mcp_types.ImageContent]:
    """Convert ContentParts in order."""
    return [mcp_from_part(p) for p in parts]


def text_of(parts: Sequence[ContentPart], *, image_note: bool = True) -> str:
    """The text of `parts` joined by newlines; images become `[image <mime>]` unless `image_note` is False."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append(part.text)
        elif image_note:
            out.append(f"[image {part.mime_type}]")
    return "\n".join(out)


def outcome_blocks(outcome: ToolOutcome) -> list[Any]:
    """A call's result for an MCP client: the server's own blocks where it gave them, its texts as kept.

    Text blocks are the parts the runtime keeps (scrubbed, cut to size); other blocks (audio,
    resources, links) go on as the server gave them. The agent's gateway and the fleet use it.
    """
    blocks = outcome.blocks or (None,) * len(outcome.content)
    return [
        block
        if block is not None and not isinstance(block, mcp_types.TextContent)
        else mcp_types.TextContent(type="text", text=p.text)
        if isinstance(p, TextPart)
        else mcp_types.ImageContent(type="image", data=p.data, mime_type=p.mime_type)
        for p, block in zip(outcome.content, blocks, strict=True)
    ]
