"""The Gemini API's own wire format (`generateContent`): responses, read by pure functions.

A response holds `candidates[0].content.parts` (`text`, `functionCall`, and `thought: true`
parts, which are the model's reasoning summary and not its answer), `finishReason` and
`usageMetadata`. A stream (`streamGenerateContent?alt=sse`) sends the same response shape in
pieces; `GeminiStreamReader` folds them into one. A part's `thoughtSignature` (Gemini 3) is kept
on the ToolCall, or for text on the Completion, to be sent back (`gemini_request`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pallas_runtime.llm.adapter import parse_arguments, wire_count
from pallas_runtime.llm.gemini_request import GENERATED_ID
from pallas_runtime.messages import Completion, ToolCall, Usage


def usage_from_gemini(usage: object) -> Usage:
    """Map `usageMetadata` onto token kinds.

    `promptTokenCount` includes the cached tokens (`cachedContentTokenCount`), so `input` is the
    difference and `cache_read` the cached count; `output` is `candidatesTokenCount` plus
    `thoughtsTokenCount` (thinking is billed as output), and `reasoning` the thinking alone.
    """
    if not isinstance(usage, Mapping):
        return Usage()
    cached = wire_count(usage.get("cachedContentTokenCount"))
    thoughts = wire_count(usage.get("thoughtsTokenCount"))
    return Usage(
        input=max(wire_count(usage.get("promptTokenCount")) - cached, 0),
        output=wire_count(usage.get("candidatesTokenCount")) + thoughts,
        cache_read=cached,
        reasoning=thoughts,
    )


def completion_from_gemini(body: Mapping[str, Any]) -> Completion:
    """A generateContent response body as a Completion.

    Raises:
        ValueError: No candidate (a blocked prompt says why) or no content parts where the
            finish reason does not explain their absence.
    """
    candidates = body.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], Mapping):
        feedback = body.get("promptFeedback")
        reason = feedback.get("blockReason") if isinstance(feedback, Mapping) else None
        raise ValueError(f"the prompt was blocked ({reason})" if reason else "the response has no candidate")
    candidate = candidates[0]
    finish = candidate.get("finishReason")
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, Mapping) else None
    texts: list[str] = []
    calls: list[ToolCall] = []
    signature: str | None = None
    for index, part in enumerate(parts if isinstance(parts, list) else []):
        if not isinstance(part, Mapping) or part.get("thought") is True:
            continue
        signed = part.get("thoughtSignature")
        if isinstance(function := part.get("functionCall"), Mapping):
            arguments, error = parse_arguments(function.get("args"))
            call_id = str(function.get("id") or f"{GENERATED_ID}{index}")
            kept = signed if isinstance(signed, str) else None
            calls.append(ToolCall(call_id, str(function.get("name") or ""), arguments, error, kept))
        elif isinstance(text := part.get("text"), str):
            texts.append(text)
            if isinstance(signed, str):
                signature = signed
    return Completion(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=usage_from_gemini(body.get("usageMetadata")),
        stop_reason=str(finish) if finish is not None else None,
        signature=signature,
    )


class GeminiStreamReader:
    """The chunks of a `streamGenerateContent` stream folded into one response body.

    Each chunk is a response with the next parts: text pieces are joined (a signature arriving
    on an empty text part at the end belongs to the text before it), function calls come whole;
    the last chunk's `finishReason` and `usageMetadata` are the answer's.
    """

    def __init__(self) -> None:
        self._parts: list[dict[str, Any]] = []
        self._texts: list[str] = []
        self._signature: str | None = None
        self._finish: object = None
        self._usage: object = None
        self._feedback: object = None

    def feed(self, event: Mapping[str, Any]) -> str:
        """Take one chunk; the answer text it adds."""
        if (usage := event.get("usageMetadata")) is not None:
            self._usage = usage
        if (feedback := event.get("promptFeedback")) is not None:
            self._feedback = feedback
        candidates = event.get("candidates")
        if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
            return ""
        candidate = candidates[0]
        if candidate.get("finishReason") is not None:
            self._finish = candidate["finishReason"]
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        added: list[str] = []
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict):
                continue
            if part.get("thought") is not True and isinstance(text := part.get("text"), str):
                added.append(text)
                if isinstance(signed := part.get("thoughtSignature"), str):
                    self._signature = signed
            elif "functionCall" in part:
                self._parts.append(part)
        self._texts.extend(added)
        return "".join(added)

    def body(self) -> dict[str, Any]:
        """The body a non-streamed answer would have had."""
        text: dict[str, Any] = {"text": "".join(self._texts)}
        if self._signature is not None:
            text["thoughtSignature"] = self._signature
        parts = [text, *self._parts] if self._texts else self._parts
        body: dict[str, Any] = {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": self._finish}],
            "usageMetadata": self._usage,
        }
        if self._feedback is not None and not parts and self._finish is None:
            body = {"promptFeedback": self._feedback, "usageMetadata": self._usage}
        return body
