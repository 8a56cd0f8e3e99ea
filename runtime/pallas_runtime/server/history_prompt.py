"""The `<agent>_history` prompt: a stored conversation as MCP messages (docs/api.md §3).

User text and images, assistant text, and the turn's tool activity as assistant lines
(`agent/trace.py`); a turn kept as failed (the agent stopped while it ran) as the assistant line
`[turn failed] CODE: message`. Naming no stored conversation is a prompt error, logged by us at INFO
without a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastmcp import FastMCP
from fastmcp.prompts import Message as PromptMessage
from fastmcp.prompts import Prompt
from mcp_types import ImageContent

from pallas_api.config import AgentConfig
from pallas_api.errors import ErrorCode
from pallas_runtime.agent.trace import tool_activity
from pallas_runtime.agent.turns import Conversations, NoConversation
from pallas_runtime.conversations.caller import checked_id, current_caller
from pallas_runtime.conversations.model import StoreUnavailable
from pallas_runtime.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ToolResultsMessage,
    TurnFailure,
    UserMessage,
)
from pallas_runtime.server.descriptions import history_description
from pallas_runtime.server.request import session_id
from pallas_runtime.server.tool_errors import CodedPromptError

log = logging.getLogger("pallas.server")


class HistoryPrompt:
    """The prompt over the agent's conversations."""

    def __init__(self, config: AgentConfig, conversations: Conversations) -> None:
        self._config = config
        self._agent = config.name
        self._conversations = conversations

    def add_to(self, mcp: FastMCP) -> None:
        """Offer the prompt as `<agent>_history`."""
        mcp.add_prompt(
            Prompt.from_function(
                self.history, name=f"{self._agent}_history", description=history_description(self._config)
            )
        )

    async def history(self, conversation_id: str | None = None) -> list[PromptMessage]:
        """The caller's conversation the request names, or the one its scope gives it."""
        try:
            checked = checked_id(conversation_id) if conversation_id else None
            messages = await self._conversations.history(current_caller(), checked, session_id())
        except (NoConversation, ValueError, StoreUnavailable) as exc:
            # A caller's mistake is one INFO line without a traceback (fastmcp logs the error it
            # re-raises at the error's own level, with one: DEBUG keeps that out of the log).
            level = logging.WARNING if isinstance(exc, StoreUnavailable) else logging.INFO
            log.log(level, "%s_history failed: %s", self._agent, exc, extra={"agent": self._agent})
            raise CodedPromptError(str(exc), _code_of(exc)) from None
        return prompt_messages(messages)


def _code_of(exc: Exception) -> ErrorCode:
    """The code of a history request's failure: no such conversation, a bad id, the store down."""
    if isinstance(exc, NoConversation):
        return ErrorCode.NOT_FOUND
    if isinstance(exc, StoreUnavailable):
        return ErrorCode.SERVER_UNAVAILABLE
    return ErrorCode.INVALID_ARGUMENTS


def prompt_messages(messages: Sequence[Message]) -> list[PromptMessage]:
    """Stored messages as the prompt shows them: the tool activity as the assistant's lines."""
    rendered: list[PromptMessage] = []
    for message in messages:
        if isinstance(message, UserMessage):
            for part in message.content:
                if isinstance(part, TextPart):
                    rendered.append(PromptMessage(part.text, role="user"))
                elif isinstance(part, ImagePart):
                    image = ImageContent(type="image", data=part.data, mime_type=part.mime_type)
                    rendered.append(PromptMessage(image, role="user"))
        elif isinstance(message, AssistantMessage | ToolResultsMessage):
            # Tool activity is the agent's side of the turn: the assistant's role, one line each.
            rendered.extend(PromptMessage(line, role="assistant") for line in tool_activity(message))
            if isinstance(message, AssistantMessage) and message.text:
                rendered.append(PromptMessage(message.text, role="assistant"))
        elif isinstance(message, TurnFailure):
            rendered.append(PromptMessage(failure_line(message), role="assistant"))
    return rendered


FAILED_TURN = "[turn failed]"
"""How the history prompt starts the line of a turn kept as failed."""


def failure_line(failure: TurnFailure) -> str:
    """`[turn failed] AGENT_SHUTTING_DOWN: the agent stopped before this turn finished …`."""
    return f"{FAILED_TURN} {failure.code}: {failure.message}"
