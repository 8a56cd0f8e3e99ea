"""The agent's spans, in the OpenTelemetry GenAI and MCP semantic conventions (docs/api.md §5, Traces).

One turn is `invoke_agent <agent>` (under fastmcp's server span of the inbound `tools/call`), its
LLM calls `chat <model>` (`gen_ai.operation.name`, `gen_ai.provider.name`,
`gen_ai.request.model`, `gen_ai.usage.input_tokens`/`output_tokens`,
`gen_ai.response.finish_reasons`, `gen_ai.conversation.id`), each downstream tool call
`execute_tool <tool>` and each delegation `invoke_agent <peer>`. The MCP client span under a
tool call or delegation carries the trace to the next process in the request's `_meta`
(`traceparent`), so an orchestrator → researcher → tool turn is one trace.

Prompts, answers and tool arguments go on spans only with
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, scrubbed of the agent's secrets like
everything it passes on; credentials never. Off (`pallas_io.tracing.enabled()` false) every
helper returns the shared no-op before building anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry.trace import Span, StatusCode

from pallas_api.config import ProviderConfig
from pallas_io import tracing
from pallas_io.logs import SecretValues
from pallas_runtime.messages import (
    AssistantMessage,
    Completion,
    ContentPart,
    Message,
    TextPart,
    ToolResultsMessage,
    UserMessage,
)

_NO_SECRETS = SecretValues()


def provider_name(provider: ProviderConfig) -> str:
    """`gen_ai.provider.name`: `openai`, `anthropic`, `gcp.gemini`, `aws.bedrock` or `gcp.vertex_ai`."""
    if provider.type == "bedrock":  # Bedrock's own Converse API
        return "aws.bedrock"
    direct = "gcp.gemini" if provider.type == "gemini" else provider.type
    return {"bedrock": "aws.bedrock", "vertex": "gcp.vertex_ai"}.get(provider.platform, direct)


def turn_span(agent: str, conversation_id: str | None) -> AbstractContextManager[Span | None]:
    """`invoke_agent <agent>`: one send_message turn of this agent."""
    if not tracing.enabled():
        return tracing.span("")
    attributes: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}
    if conversation_id:
        attributes["gen_ai.conversation.id"] = conversation_id
    return tracing.span(f"invoke_agent {agent}", tracing.SpanKind.INTERNAL, attributes)


def llm_span(
    agent: str,
    provider: str,
    model: str,
    conversation_id: str | None,
    *,
    system: str,
    messages: Sequence[Message],
    secrets: SecretValues | None,
) -> AbstractContextManager[Span | None]:
    """`chat <model>`: one LLM request (retries included); its usage comes with `completed`."""
    if not tracing.enabled():
        return tracing.span("")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "gen_ai.agent.name": agent,
    }
    if conversation_id:
        attributes["gen_ai.conversation.id"] = conversation_id
    if tracing.capture_content():
        scrub = (secrets or _NO_SECRETS).scrub
        attributes["gen_ai.system_instructions"] = json.dumps(
            [{"type": "text", "content": scrub(system)}], ensure_ascii=False
        )
        attributes["gen_ai.input.messages"] = json.dumps(
            [_message(m, scrub) for m in messages], ensure_ascii=False
        )
    return tracing.span(f"chat {model}", tracing.SpanKind.CLIENT, attributes)


def completed(span: Span | None, completion: Completion, secrets: SecretValues | None) -> None:
    """Put what the model answered on its `chat` span: usage, finish reason, the answer if captured."""
    if span is None:
        return
    usage = completion.usage
    span.set_attribute("gen_ai.usage.input_tokens", usage.input)
    span.set_attribute("gen_ai.usage.output_tokens", usage.output)
    if completion.stop_reason:
        span.set_attribute("gen_ai.response.finish_reasons", (completion.stop_reason,))
    if tracing.capture_content():
        scrub = (secrets or _NO_SECRETS).scrub
        answer = AssistantMessage(completion.text, completion.tool_calls)
        span.set_attribute(
            "gen_ai.output.messages", json.dumps([_message(answer, scrub)], ensure_ascii=False)
        )


def tool_span(
    agent: str,
    server: str,
    tool: str,
    *,
    peer: bool,
    arguments: Mapping[str, Any],
    secrets: SecretValues | None,
) -> AbstractContextManager[Span | None]:
    """`execute_tool <tool>` for a downstream server's tool, `invoke_agent <peer>` for a delegation."""
    if not tracing.enabled():
        return tracing.span("")
    attributes: dict[str, Any] = {"gen_ai.agent.name": agent, "mcp.method.name": "tools/call"}
    if peer:
        name = f"invoke_agent {server}"
        kind = tracing.SpanKind.CLIENT
        attributes.update({"gen_ai.operation.name": "invoke_agent", "pallas.peer.agent": server})
    else:
        name = f"execute_tool {tool}"
        kind = tracing.SpanKind.INTERNAL
        attributes.update(
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "pallas.mcp.server": server}
        )
    if tracing.capture_content():
        scrub = (secrets or _NO_SECRETS).scrub
        attributes["gen_ai.tool.call.arguments"] = scrub(
            json.dumps(arguments, ensure_ascii=False, default=str)
        )
    return tracing.span(name, kind, attributes)


def tool_finished(span: Span | None, outcome: str, code: str | None) -> None:
    """The tool call's audit outcome (`ALLOW`, `ERROR`, `TIMEOUT`) and error code on its span."""
    if span is None:
        return
    span.set_attribute("pallas.tool.outcome", outcome)
    if outcome != "ALLOW":
        span.set_attribute("error.type", code or "tool_error")
        span.set_status(StatusCode.ERROR, code or outcome)


def _message(message: Message, scrub: Callable[[str], str]) -> dict[str, Any]:
    """One message in the GenAI conventions' shape: role and parts (text, tool calls, results)."""
    if isinstance(message, UserMessage):
        return {"role": "user", "parts": [{"type": "text", "content": _texts(message.content, scrub)}]}
    if isinstance(message, ToolResultsMessage):
        return {
            "role": "tool",
            "parts": [
                {"type": "tool_call_response", "id": r.call_id, "response": _texts(r.content, scrub)}
                for r in message.results
            ],
        }
    if isinstance(message, AssistantMessage):
        parts: list[dict[str, Any]] = []
        if message.text:
            parts.append({"type": "text", "content": scrub(message.text)})
        parts.extend(
            {"type": "tool_call", "id": c.id, "name": c.name, "arguments": scrub(json.dumps(c.arguments))}
            for c in message.tool_calls
        )
        return {"role": "assistant", "parts": parts}
    return {"role": message.role, "parts": []}


def _texts(content: Sequence[ContentPart], scrub: Callable[[str], str]) -> str:
    return "\n".join(scrub(p.text) for p in content if isinstance(p, TextPart))
