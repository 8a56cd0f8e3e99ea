"""One MCP session of `pallas chat` with an agent: the conversation, the calls, the failures.

The session is stateful (legacy mode) and carries a generated `conversation_id`, so the agent keeps
the history; every `send_message` carries a progress token (shown by `TurnDisplay`) and asks for
the turn's tool calls (`_meta["pallas.dev/toolCalls"]`). Failures are a `ChatError`: one line for
the user.
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp import MCPError

from pallas_api.names import INSTRUCTION_URI, TOOL_CALLS_META
from pallas_io.probe import probe
from pallas_runtime.commands.chat.display import TurnDisplay
from pallas_runtime.commands.chat.params import PARAMS_ARGUMENT, accepted_params, checked, wire_params

SEND_MESSAGE = "send_message"
# Exit codes: 1 for an error talking to the agent, 2 for bad arguments (argparse's convention).
EXIT_ERROR = 1
EXIT_USAGE = 2


class ChatError(Exception):
    """A failure worth one clear line to the user."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def text_of(content: Sequence[Any]) -> str:
    """The text of MCP content blocks; other blocks as `[type mime]`."""
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        if text is not None:
            parts.append(str(text))
        elif (mime := getattr(block, "mime_type", None)) is not None:
            parts.append(f"[{getattr(block, 'type', 'binary')} {mime}]")
    return "\n".join(parts)


@dataclass(frozen=True)
class Turn:
    """The agent's answer to one message."""

    result: mcp_types.CallToolResult
    """The raw tool result (what `--json` prints)."""

    @property
    def text(self) -> str:
        """The answer (or the error) as text."""
        return text_of(self.result.content)

    @property
    def failed(self) -> bool:
        """Whether the agent answered with a tool error."""
        return bool(self.result.is_error)

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls the agent made, if it said (see `pallas_runtime.agent.trace`)."""
        calls = (self.result.meta or {}).get(TOOL_CALLS_META)
        return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []

    def document(self) -> str:
        """The raw result as one JSON document (MCP's wire names)."""
        return json.dumps(self.result.model_dump(mode="json", by_alias=True, exclude_none=True))


@dataclass
class ChatSession:
    """One MCP session with an agent and the conversation being had over it."""

    client: Client[Any]
    agent: str
    """The agent's name from `serverInfo` (its history prompt is `<agent>_history`)."""
    display: TurnDisplay
    timeout: float
    conversation_id: str
    params: dict[str, Any] = field(default_factory=dict)
    """Per-call LLM parameters set with `/set` (field names of `RequestParams`)."""
    _tools: list[mcp_types.Tool] | None = None

    async def send(self, message: str) -> Turn:
        """The agent's answer to `message` (a tool error is a `Turn` that `failed`).

        Raises:
            ChatError: the call itself failed.
        """
        arguments: dict[str, Any] = {"message": message, "conversation_id": self.conversation_id}
        if self.params and (accepted := await self.accepted_params()) is not None:
            arguments[PARAMS_ARGUMENT] = wire_params(self.params, accepted)
        try:
            with self.display.working():
                result = await self.client.call_tool_mcp(
                    SEND_MESSAGE,
                    arguments,
                    progress_handler=self.display.progress,
                    timeout=self.timeout,
                    meta={TOOL_CALLS_META: True},
                )
        except MCPError as exc:
            raise ChatError(f"send_message failed: {exc.error.message}") from None
        except (RuntimeError, httpx2.HTTPError, OSError) as exc:
            raise ChatError(f"lost the connection to {self.agent}: {_reason(exc)}") from None
        return Turn(result)

    async def tools(self) -> list[mcp_types.Tool]:
        """The agent's MCP tools (listed once per session)."""
        if self._tools is None:
            try:
                self._tools = await self.client.list_tools()
            except MCPError as exc:
                raise ChatError(f"tools/list failed: {exc.error.message}") from None
            except (RuntimeError, httpx2.HTTPError, OSError) as exc:
                raise ChatError(f"lost the connection to {self.agent}: {_reason(exc)}") from None
        return self._tools

    async def accepted_params(self) -> set[str] | None:
        """The parameter names `send_message` takes in `params`; None: it takes no `params`."""
        tool = next((t for t in await self.tools() if t.name == SEND_MESSAGE), None)
        return accepted_params(tool.input_schema if tool else None)

    async def set_param(self, key: str, raw: str) -> str:
        """Check and keep `/set key raw`; what will be sent, in words.

        Raises:
            ParamsError: an unknown key or a bad value (the text names the key).
        """
        name, value = checked(key, raw)
        if value is None:
            self.params.pop(name, None)
        else:
            self.params[name] = value
        accepted = await self.accepted_params()
        if accepted is None:
            return (
                f"{self.agent}'s send_message takes no params (its Pallas predates them): "
                f"{json.dumps(self.params)} is kept here but not sent"
            )
        if not self.params:
            return "no params: messages are sent without them"
        return f"every message now carries params {json.dumps(wire_params(self.params, accepted))}"

    async def instruction(self) -> str:
        """The agent's instruction (its model's system prompt).

        Raises:
            ChatError: the agent does not publish it (an older Pallas), or the read failed.
        """
        try:
            contents = await self.client.read_resource(INSTRUCTION_URI)
        except MCPError as exc:
            raise ChatError(
                f"{self.agent} does not publish its instruction ({INSTRUCTION_URI}): {exc.error.message}"
            ) from None
        except (RuntimeError, httpx2.HTTPError, OSError) as exc:
            raise ChatError(f"lost the connection to {self.agent}: {_reason(exc)}") from None
        return text_of(contents)

    async def messages(self) -> list[tuple[str, str]]:
        """This conversation as (role, text) pairs (empty before the first answer)."""
        try:
            prompt = await self.client.get_prompt(
                f"{self.agent}_history", {"conversation_id": self.conversation_id}
            )
        except MCPError as exc:
            if "no stored conversation" in exc.error.message:
                return []
            raise ChatError(f"{self.agent}_history failed: {exc.error.message}") from None
        return [(str(m.role), text_of([m.content])) for m in prompt.messages]

    def clear(self) -> None:
        """Start a new conversation (the agent keeps the old one; `/threads` lists it)."""
        self.conversation_id = new_conversation_id()

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """The text of a plain tool call (the conversation tools).

        Raises:
            ChatError: the call failed or answered with an error.
        """
        try:
            result = await self.client.call_tool(tool, arguments, timeout=self.timeout, raise_on_error=False)
        except MCPError as exc:
            raise ChatError(f"{tool} failed: {exc.error.message}") from None
        except (RuntimeError, httpx2.HTTPError, OSError) as exc:
            raise ChatError(f"lost the connection to {self.agent}: {_reason(exc)}") from None
        text = text_of(result.content)
        if result.is_error:
            raise ChatError(text or f"{tool} failed")
        return text

    async def threads(self) -> list[str]:
        """Your conversations with the agent, one line each, this one marked with `*`."""
        try:
            listing = json.loads(await self.call("list_conversations", {}))["conversations"]
        except (ValueError, KeyError, TypeError):
            raise ChatError("list_conversations did not answer a conversation list") from None
        return [
            f"{'*' if t['id'] == self.conversation_id else ' '} {t['id']}  {t['updatedAt']}  "
            f"{t['messageCount']:>4} messages  {t['title']}"
            for t in listing
        ]

    def resume(self, conversation_id: str) -> None:
        """Continue an earlier conversation (its id from `/threads`)."""
        self.conversation_id = conversation_id

    async def delete(self, conversation_id: str | None) -> str:
        """Delete a conversation (this one by default, then start a new one)."""
        target = conversation_id or self.conversation_id
        await self.call("delete_conversation", {"conversation_id": target})
        if target == self.conversation_id:
            self.clear()
        return target


def new_conversation_id() -> str:
    """A fresh, unguessable conversation id."""
    return f"chat-{uuid.uuid4().hex}"


@contextlib.asynccontextmanager
async def open_session(
    url: str, headers: dict[str, str], wait: float, conversation_id: str | None
) -> AsyncIterator[ChatSession]:
    """Connect to the agent at `url` (a legacy, stateful MCP session) and yield a `ChatSession`.

    Raises:
        ChatError: the URL is unreachable or does not speak MCP.
    """
    transport = StreamableHttpTransport(url, headers=headers)
    client: Client[Any] = Client(transport, mode="legacy", timeout=wait, init_timeout=min(wait, 30))
    connection = contextlib.AsyncExitStack()
    try:
        await connection.enter_async_context(client)
    except MCPError as exc:
        refusal = await _refusal(url, headers, wait)
        raise ChatError(refusal or f"{url} is not an MCP server: {exc.error.message}") from None
    except (RuntimeError, httpx2.HTTPError, OSError) as exc:
        refusal = await _refusal(url, headers, wait)
        raise ChatError(f"cannot connect to {url}: {refusal or _reason(exc)}") from None
    try:
        info = client.initialize_result.server_info if client.initialize_result else None
        yield ChatSession(
            client=client,
            agent=info.name if info else "agent",
            display=TurnDisplay(sys.stderr, answer=sys.stdout),
            timeout=wait,
            conversation_id=conversation_id or new_conversation_id(),
        )
    finally:
        # Ending the session (an HTTP DELETE) is a courtesy: a failure there, say because the
        # agent went away, must not hide the outcome of the chat itself.
        with contextlib.suppress(Exception):
            await connection.aclose()


async def _refusal(url: str, headers: dict[str, str], wait: float) -> str | None:
    """What a 401 or 403 of an agent checking callers means, and what to do; None for others.

    The MCP client reports an HTTP error status as a bare "error response"; one plain MCP probe
    of the endpoint tells the statuses apart.
    """
    outcome = await probe(url, budget=min(wait, 10.0), headers=headers)
    sent = any(name.lower() == "authorization" for name in headers)
    if outcome.unauthorized and not sent:
        return (
            "the agent asks for a bearer token (401): pass --token, set PALLAS_TOKEN, "
            "or --as-serviceaccount NS/NAME"
        )
    if outcome.unauthorized:
        return "the agent refused the token (401): it is invalid, expired, or for another audience or issuer"
    if outcome.message.startswith("HTTP 403"):
        return (
            "the token is valid but this caller may not talk to the agent (403): it needs RBAC verb "
            "invoke on the PallasAgent (auth.mode kubernetes) or a place in its spec.access (auth.mode oidc)"
        )
    return None


def _reason(exc: BaseException) -> str:
    """The most telling text of a transport failure (fastmcp wraps the httpx2 error)."""
    cause = exc.__cause__ or exc
    return str(cause) or type(cause).__name__
