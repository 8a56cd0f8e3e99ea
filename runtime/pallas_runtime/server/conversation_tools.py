"""`create_conversation`, `list_conversations` and `delete_conversation`: a caller's threads (docs/api.md §3).

Tools of the agent's own MCP surface, never offered to models. Without inbound auth (and in any
scope but `caller`) a client sees and deletes only what its MCP session started or named.
"""

from __future__ import annotations

import json

from fastmcp import FastMCP
from fastmcp.tools import Tool, ToolResult
from mcp_types import ToolAnnotations

from pallas_api.config import AgentConfig, ConversationMetadata, SendParams
from pallas_api.errors import ErrorCode
from pallas_api.health import utc_timestamp
from pallas_api.names import CONVERSATION_META
from pallas_runtime.agent.choice import ChoiceRefused, conversation_model
from pallas_runtime.agent.turns import Conversations, NoConversation
from pallas_runtime.conversations.caller import current_caller
from pallas_runtime.conversations.model import StoreUnavailable
from pallas_runtime.server.conversation_gauge import ConversationGauge
from pallas_runtime.server.descriptions import (
    CREATE_CONVERSATION_DESCRIPTION,
    DELETE_CONVERSATION_DESCRIPTION,
    list_conversations_description,
)
from pallas_runtime.server.request import checked_conversation_id, session_id
from pallas_runtime.server.tool_errors import CodedToolError


class ConversationTools:
    """The two tools over the agent's conversations."""

    def __init__(self, config: AgentConfig, conversations: Conversations, gauge: ConversationGauge) -> None:
        self._config = config
        self._conversations = conversations
        self._gauge = gauge

    def add_to(self, mcp: FastMCP) -> None:
        """Offer the three tools."""
        offered = (
            (self.create_conversation, CREATE_CONVERSATION_DESCRIPTION, None),
            (
                self.list_conversations,
                list_conversations_description(self._config),
                ToolAnnotations(read_only_hint=True),
            ),
            (
                self.delete_conversation,
                DELETE_CONVERSATION_DESCRIPTION,
                ToolAnnotations(destructive_hint=True, idempotent_hint=True),
            ),
        )
        for function, description, hints in offered:
            mcp.add_tool(
                Tool.from_function(
                    function,
                    name=function.__name__,
                    description=description,
                    output_schema=None,
                    annotations=hints,
                )
            )

    async def create_conversation(self, metadata: ConversationMetadata | None = None) -> ToolResult:
        """A new conversation of the caller, with its provider and model checked and kept."""
        chosen = metadata or ConversationMetadata()
        config = self._config
        try:
            model = conversation_model(config, chosen.provider, chosen.model)
            if model is not None and (refusal := config.call_params.refusal(SendParams(model=model))):
                raise ChoiceRefused(refusal.replace("params.model", "metadata.model"))
            settings = {} if model is None else {"model": model}
            conversation_id = await self._conversations.create(
                current_caller(), session_id(), settings, chosen.title or ""
            )
        except (ChoiceRefused, NoConversation) as exc:
            raise CodedToolError(str(exc), ErrorCode.INVALID_ARGUMENTS, processed=False) from None
        except StoreUnavailable as exc:
            raise CodedToolError(str(exc), ErrorCode.SERVER_UNAVAILABLE, processed=False) from None
        await self._gauge.changed(count_changed=True)
        option = config.model_option(model or config.model)
        provider = option.provider.name if option is not None and option.provider else config.provider.name
        answer = {
            "conversationId": conversation_id,
            "provider": provider,
            "model": option.model if option is not None else config.model,
            "status": "active",
        }
        return ToolResult(content=json.dumps(answer), meta={CONVERSATION_META: conversation_id})

    async def list_conversations(self) -> str:
        """The caller's conversations, most recent first, as JSON."""
        try:
            threads = await self._conversations.threads(current_caller(), session_id())
        except StoreUnavailable as exc:
            raise CodedToolError(str(exc), ErrorCode.SERVER_UNAVAILABLE) from None
        return json.dumps(
            {
                "conversations": [
                    {
                        "id": t.id,
                        "title": t.title,
                        "updatedAt": utc_timestamp(t.updated_at),
                        "messageCount": t.message_count,
                    }
                    for t in threads
                ]
            }
        )

    async def delete_conversation(self, conversation_id: str) -> str:
        """Forget one of the caller's conversations."""
        try:
            await self._conversations.delete(
                current_caller(), checked_conversation_id(conversation_id) or "", session_id()
            )
        except NoConversation as exc:
            raise CodedToolError(str(exc), ErrorCode.NOT_FOUND) from None
        except StoreUnavailable as exc:
            raise CodedToolError(str(exc), ErrorCode.SERVER_UNAVAILABLE) from None
        await self._gauge.changed(count_changed=True)
        return f"deleted conversation {conversation_id!r}"
