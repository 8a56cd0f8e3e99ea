"""`list_conversations` and `delete_conversation`: a caller's threads (docs/api.md §3).

Tools of the agent's own MCP surface, never offered to models. Without inbound auth (and in any
scope but `caller`) a client sees and deletes only what its MCP session started or named.
"""

from __future__ import annotations

import json

from fastmcp import FastMCP
from fastmcp.tools import Tool
from mcp_types import ToolAnnotations

from pallas_api.config import AgentConfig
from pallas_api.errors import ErrorCode
from pallas_api.health import utc_timestamp
from pallas_runtime.agent.turns import Conversations, NoConversation
from pallas_runtime.conversations.caller import current_caller
from pallas_runtime.conversations.model import StoreUnavailable
from pallas_runtime.server.conversation_gauge import ConversationGauge
from pallas_runtime.server.descriptions import DELETE_CONVERSATION_DESCRIPTION, list_conversations_description
from pallas_runtime.server.request import checked_conversation_id, session_id
from pallas_runtime.server.tool_errors import CodedToolError


class ConversationTools:
    """The two tools over the agent's conversations."""

    def __init__(self, config: AgentConfig, conversations: Conversations, gauge: ConversationGauge) -> None:
        self._config = config
        self._conversations = conversations
        self._gauge = gauge

    def add_to(self, mcp: FastMCP) -> None:
        """Offer both tools."""
        mcp.add_tool(
            Tool.from_function(
                self.list_conversations,
                name="list_conversations",
                description=list_conversations_description(self._config),
                output_schema=None,
                annotations=ToolAnnotations(read_only_hint=True),
            )
        )
        mcp.add_tool(
            Tool.from_function(
                self.delete_conversation,
                name="delete_conversation",
                description=DELETE_CONVERSATION_DESCRIPTION,
                output_schema=None,
                annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True),
            )
        )

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
