"""What the agent's tools, prompt and resource say about themselves, and under which names.

The texts are part of the contract (docs/api.md §3): an orchestrator offers a peer's
`send_message` to its model under the peer's own description, and a caller learns from the
descriptions what a conversation scope keeps and what an id shares without inbound auth.
"""

from __future__ import annotations

import logging

from pallas_api.config import AgentConfig

log = logging.getLogger("pallas.server")

SEND_MESSAGE_DESCRIPTION = (
    "Send a message (optionally with images) to this agent and get its answer. "
    "params (optional) overrides the agent's request parameters for this call; null clears one."
)
SCOPE_DESCRIPTIONS = {
    "caller": " Without conversation_id you continue your one default conversation with this agent, "
    "from any session. Pass another conversation_id to keep a separate conversation.",
    "session": " Without conversation_id the conversation is this MCP session's own; pass the same "
    "conversation_id to continue a conversation across sessions.",
    "request": " This agent keeps no conversations: every message starts afresh.",
}
SHARED_ID_WARNING = (
    " This agent does not identify its callers: a conversation_id is shared by everyone who knows it, "
    "so choose one nobody can guess."
)
SHARED_DEFAULT_WARNING = (
    " This agent does not identify its callers: every client continues the same conversation."
)
BUILT_IN_TOOLS = frozenset({"send_message", "get_health", "list_conversations", "delete_conversation"})
LIST_CONVERSATIONS_DESCRIPTION = (
    "Your conversations with this agent, most recent first: id, title (the start of the first "
    "message), last turn time and message count. Continue one by passing its id as conversation_id."
)
LIST_CONVERSATIONS_ANONYMOUS = (
    " This agent does not identify its callers, so it lists only the conversations this MCP session "
    "started or named."
)
DELETE_CONVERSATION_DESCRIPTION = "Delete one of your conversations with this agent, by id."
CREATE_CONVERSATION_DESCRIPTION = (
    "Start a new conversation with this agent and get its id, to pass as send_message's "
    "conversation_id. metadata.provider and metadata.model choose the model every turn of it "
    "runs on (among those this agent offers); metadata.title names it in list_conversations."
)
GET_HEALTH_DESCRIPTION = "Returns the health status of this agent and its downstream dependencies."


def send_message_description(config: AgentConfig) -> str:
    """What `send_message` says: who this agent is, then how to call it.

    An orchestrator offers a peer's `send_message` to its model under the peer's description,
    so the agent's title and description must be in it for that model to know what the peer is
    for (the generic text alone says nothing about it).
    """
    about = config.display_title
    if config.description:
        about += f": {config.description.rstrip('.')}."
    scope = config.conversation_scope
    text = f"{about} {SEND_MESSAGE_DESCRIPTION}{SCOPE_DESCRIPTIONS[scope]}"
    if config.auth.mode == "none" and scope != "request":
        text += SHARED_DEFAULT_WARNING if scope == "caller" else SHARED_ID_WARNING
    return text


def list_conversations_description(config: AgentConfig) -> str:
    """What `list_conversations` says, including what an anonymous client is shown."""
    if config.auth.mode == "none" and config.conversation_scope != "caller":
        return LIST_CONVERSATIONS_DESCRIPTION + LIST_CONVERSATIONS_ANONYMOUS
    return LIST_CONVERSATIONS_DESCRIPTION


def history_description(config: AgentConfig) -> str:
    """What the `<agent>_history` prompt says."""
    return f"The stored conversation with {config.display_title}, as MCP messages."


def instruction_description(config: AgentConfig) -> str:
    """What the `pallas://instruction` resource says."""
    return f"The instruction (system prompt) {config.display_title}'s model works under."


def send_message_names(config: AgentConfig) -> tuple[str, ...]:
    """`send_message` and its alias `<agent>`, unless the name is taken by a built-in tool.

    Agent names are DNS labels, always valid MCP (and LLM function) tool names and never equal
    to a built-in (those have an underscore); the check guards against a future built-in.
    """
    if config.name in BUILT_IN_TOOLS:
        log.warning("agent %s: no alias tool: the name is a built-in tool's", config.name)
        return ("send_message",)
    return ("send_message", config.name)
