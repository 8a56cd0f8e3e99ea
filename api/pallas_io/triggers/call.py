"""One run's call to its agent: `send_message` as any MCP client sends it.

The run names itself in the MCP handshake (`clientInfo.name` = `trigger:<namespace>/<name>`) and
carries the credential the host gives it (`pallas run`: its `--token`), so the agent's auth,
access lists, budgets and audit lines treat it as one more caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp import MCPError
from mcp_types import Implementation, TextContent

from pallas_api.names import CONVERSATION_META
from pallas_api.spending import MICROS, reported_spend

CLIENT_VERSION = "1"
SEND_MESSAGE = "send_message"


class RunFailed(Exception):
    """The agent did not answer; `reason` is a CamelCase word for status, the text for humans."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Answer:
    """What a run got back."""

    text: str
    conversation_id: str | None
    tokens: int | None
    cost: float | None


def identity(namespace: str, name: str) -> str:
    """The caller name of a trigger's runs."""
    return f"trigger:{namespace}/{name}"


async def call_agent(
    url: str, message: str, conversation_id: str, headers: Mapping[str, str], caller: str
) -> Answer:
    """Send `message` to the agent at `url` in `conversation_id`.

    Raises:
        RunFailed: the agent refused, failed the turn, or could not be reached.
    """
    transport = StreamableHttpTransport(url, headers=dict(headers))
    client = Client(transport, client_info=Implementation(name=caller, version=CLIENT_VERSION))
    try:
        async with client:
            result = await client.call_tool(
                SEND_MESSAGE,
                {"message": message, "conversation_id": conversation_id},
                raise_on_error=False,
            )
    except MCPError as exc:
        raise RunFailed("AgentError", f"the agent refused the call: {exc.error.message}") from None
    except (RuntimeError, httpx2.HTTPError, OSError) as exc:
        cause = exc.__cause__ or exc
        raise RunFailed(
            "AgentUnreachable", f"cannot reach the agent at {url}: {cause or type(cause).__name__}"
        ) from None
    text = "".join(block.text for block in result.content if isinstance(block, TextContent))
    if result.is_error:
        raise RunFailed("AgentError", text or "the agent failed the turn")
    spent = reported_spend(result.meta)
    said = (result.meta or {}).get(CONVERSATION_META)
    return Answer(
        text=text,
        conversation_id=said if isinstance(said, str) else conversation_id,
        tokens=spent[0] if spent else None,
        cost=spent[1] / MICROS if spent else None,
    )
