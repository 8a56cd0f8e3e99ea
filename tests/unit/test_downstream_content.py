"""MCP content blocks <-> ContentPart: text and images pass through, everything else becomes a note."""

from __future__ import annotations

import base64

import mcp_types
import pytest

from pallas_runtime.downstream.content import (
    mcp_from_part,
    mcp_from_parts,
    part_from_mcp,
    parts_from_mcp,
    parts_from_result,
    text_of,
)
from pallas_runtime.messages import ImagePart, TextPart

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 100).decode()


def test_text_and_image_pass_through_in_order():
    blocks = [
        mcp_types.TextContent(type="text", text="caption"),
        mcp_types.ImageContent(type="image", data=PNG, mime_type="image/png"),
        mcp_types.TextContent(type="text", text="after"),
    ]
    assert parts_from_mcp(blocks) == (
        TextPart("caption"),
        ImagePart(data=PNG, mime_type="image/png"),
        TextPart("after"),
    )


def test_audio_becomes_a_note_with_type_and_size():
    audio = base64.b64encode(b"\0" * 2048).decode()
    part = part_from_mcp(mcp_types.AudioContent(type="audio", data=audio, mime_type="audio/wav"))
    assert part == TextPart("[audio clip (audio/wav, 2.0 KiB) not shown]")


def test_embedded_text_resource_keeps_its_text_and_uri():
    block = mcp_types.EmbeddedResource(
        type="resource",
        resource=mcp_types.TextResourceContents(
            uri="file:///notes.md", mime_type="text/markdown", text="# hi"
        ),
    )
    assert part_from_mcp(block) == TextPart("[resource file:///notes.md (text/markdown)]\n# hi")


def test_embedded_image_blob_becomes_an_image():
    block = mcp_types.EmbeddedResource(
        type="resource",
        resource=mcp_types.BlobResourceContents(uri="test://pic", mime_type="image/png", blob=PNG),
    )
    assert part_from_mcp(block) == ImagePart(data=PNG, mime_type="image/png")


def test_embedded_binary_blob_is_described_not_dropped():
    blob = base64.b64encode(b"x" * 10).decode()
    block = mcp_types.EmbeddedResource(
        type="resource",
        resource=mcp_types.BlobResourceContents(uri="test://zip", mime_type="application/zip", blob=blob),
    )
    assert part_from_mcp(block) == TextPart(
        "[binary resource test://zip (application/zip, 10 bytes) not shown]"
    )


def test_blob_without_mime_type_and_invalid_base64_still_described():
    block = mcp_types.EmbeddedResource(
        type="resource", resource=mcp_types.BlobResourceContents(uri="test://raw", blob="!!!!")
    )
    part = part_from_mcp(block)
    assert isinstance(part, TextPart)
    assert part.text.startswith("[binary resource test://raw (unknown type, ")


def test_resource_link_names_title_uri_and_details():
    link = mcp_types.ResourceLink(
        type="resource_link",
        name="report",
        title="Q3 report",
        uri="https://example.test/q3.pdf",
        mime_type="application/pdf",
        description="quarterly numbers",
    )
    assert part_from_mcp(link) == TextPart(
        "[resource link: Q3 report <https://example.test/q3.pdf> (application/pdf, quarterly numbers)]"
    )
    bare = mcp_types.ResourceLink(type="resource_link", name="x", uri="test://x")
    assert part_from_mcp(bare) == TextPart("[resource link: x <test://x>]")


@pytest.mark.parametrize(
    ("size", "expected"),
    [(0, "0 bytes"), (1023, "1023 bytes"), (1536, "1.5 KiB"), (3 * 1024 * 1024, "3.0 MiB")],
)
def test_sizes_are_human_readable(size, expected):
    data = base64.b64encode(b"\0" * size).decode()
    part = part_from_mcp(mcp_types.AudioContent(type="audio", data=data, mime_type="audio/mpeg"))
    assert part == TextPart(f"[audio clip (audio/mpeg, {expected}) not shown]")


def test_result_with_only_structured_content_becomes_json_text():
    result = mcp_types.CallToolResult(content=[], structured_content={"sum": 42, "name": "é"})
    assert parts_from_result(result) == (TextPart('{"sum": 42, "name": "é"}'),)


def test_empty_result_says_so():
    assert parts_from_result(mcp_types.CallToolResult(content=[])) == (TextPart("(no output)"),)


def test_result_content_wins_over_structured_content():
    result = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="42")], structured_content={"result": 42}
    )
    assert parts_from_result(result) == (TextPart("42"),)


def test_parts_to_mcp_round_trip():
    parts = (TextPart("hello"), ImagePart(data=PNG, mime_type="image/jpeg"))
    blocks = mcp_from_parts(parts)
    assert blocks == [
        mcp_types.TextContent(type="text", text="hello"),
        mcp_types.ImageContent(type="image", data=PNG, mime_type="image/jpeg"),
    ]
    assert parts_from_mcp(blocks) == parts
    assert mcp_from_part(TextPart("x")).model_dump(by_alias=True, exclude_none=True) == {
        "type": "text",
        "text": "x",
    }


def test_text_of_joins_text_and_notes_images():
    parts = (TextPart("a"), ImagePart(data=PNG, mime_type="image/png"), TextPart("b"))
    assert text_of(parts) == "a\n[image image/png]\nb"
    assert text_of(parts, image_note=False) == "a\nb"
