"""One MCP session of `pallas chat` with an agent: the conversation, the calls, the failures.

The session is stateful (legacy mode) and carries a generated `conversation_id`, so the agent keeps
the history; every `send_message` carries a progress token (shown by `TurnDisplay`) and asks for
the turn's tool calls (`_meta["pallas.dev/toolCalls"]`). Failures are a `ChatError`: one line for
the user.

When the agent loses the session (its process went: a rollout, a restart) or the connection
drops, the session is opened again by itself (`link.AgentLink`) and the user is told
"reconnected to URL; conversation ID continues": the conversation is named by its id, not by the
session, so it goes on wherever the agent keeps it (a shared database, SQLite under `pallas run`).
A message is sent again only when the agent did not answer it and did not keep an answer to it
(`ChatSession.send`): its session was gone (404: it never ran), the agent answered
AGENT_SHUTTING_DOWN (not processed, or kept as a failed turn), or the connection dropped while
the agent worked and the conversation, read after reconnecting, holds no answer to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import mcp_types
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp import MCPError
from mcp_types import CONNECTION_CLOSED

from pallas_api.errors import ErrorCode, error_code_of
from pallas_api.names import INSTRUCTION_URI, RESUMABLE_META, TASK_PROGRESS_PREFIX, TOOL_CALLS_META
from pallas_io.probe import probe
from pallas_runtime.commands.chat import tasks
from pallas_runtime.commands.chat.approve import TerminalApprover
from pallas_runtime.commands.chat.display import TurnDisplay
from pallas_runtime.commands.chat.link import RETRY_DELAYS, TRANSPORT_ERRORS, AgentLink, LinkError, reason
from pallas_runtime.commands.chat.params import PARAMS_ARGUMENT, accepted_params, checked, wire_params
from pallas_runtime.task_wire import TASK_LOST

SEND_MESSAGE = "send_message"
RESENDS = 3
"""How many times one message is sent again after its session was lost (each after a reconnect)."""
TOOL_ACTIVITY = ("[tool call] ", "[tool result] ", "[tool error] ", "[turn failed] ")
"""How the history prompt starts the agent's lines that are not an answer."""
T = TypeVar("T")
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

    link: AgentLink
    agent: str
    """The agent's name from `serverInfo` (its history prompt is `<agent>_history`)."""
    display: TurnDisplay
    timeout: float
    conversation_id: str
    params: dict[str, Any] = field(default_factory=dict)
    """Per-call LLM parameters set with `/set` (field names of `RequestParams`)."""
    _tools: list[mcp_types.Tool] | None = None
    _task_id: str | None = None
    """The task the agent runs the message being sent as (its first progress names it)."""

    @property
    def client(self) -> Client[Any]:
        """The MCP client of the session now (a new one after a reconnect)."""
        return self.link.client

    async def reconnect(self) -> None:
        """Open a new session after the last was lost, and say so.

        Raises:
            ChatError: no session within the link's retries.
        """
        try:
            await self.link.reconnect()
        except LinkError as exc:
            raise ChatError(str(exc)) from None
        self.display.note(
            f"pallas chat: reconnected to {self.link.url}; conversation {self.conversation_id} continues"
        )

    async def _request(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, once more on a new session if the session or its connection was lost.

        For requests that may safely run twice (listings, reads, a delete).

        Raises:
            ChatError: the request failed, or failed again after reconnecting.
        """
        for attempt in (1, 2):
            try:
                return await call()
            except MCPError as exc:
                if attempt == 2 or not self.link.lost(exc):
                    raise ChatError(f"{what} failed: {exc.error.message}") from None
            except TRANSPORT_ERRORS as exc:
                if attempt == 2:
                    raise ChatError(f"lost the connection to {self.agent}: {reason(exc)}") from None
            await self.reconnect()
        raise AssertionError("unreachable")

    async def send(self, message: str) -> Turn:
        """The agent's answer to `message` (a tool error is a `Turn` that `failed`).

        When the session is lost or the connection drops, it reconnects and sends the message
        again only if that cannot make the agent answer it twice (the module's rule).

        Raises:
            ChatError: the call failed, or the agent could not be reached again.
        """
        arguments: dict[str, Any] = {"message": message, "conversation_id": self.conversation_id}
        if self.params and (accepted := await self.accepted_params()) is not None:
            arguments[PARAMS_ARGUMENT] = wire_params(self.params, accepted)
        failure = ""
        for attempt in range(RESENDS + 1):
            try:
                result = await self._send_once(arguments)
            except MCPError as exc:
                if not self.link.lost(exc):
                    raise ChatError(f"send_message failed: {exc.error.message}") from None
                unknown, failure = not self.link.session_lost, exc.error.message
            except TRANSPORT_ERRORS as exc:
                unknown, failure = not self.link.session_lost, reason(exc)
            else:
                if error_code_of(result.structured_content) is not ErrorCode.AGENT_SHUTTING_DOWN:
                    return Turn(result)
                if attempt == RESENDS:
                    return Turn(result)  # the agent's own words: stopping, not processed or kept as failed
                unknown, failure = False, Turn(result).text
            if attempt == RESENDS:
                break
            if unknown and self._task_id is not None:
                # The agent keeps the turn running as a task: follow it instead of sending again
                # (unless its process died with it: then as without a task, below).
                followed = await self._follow(self._task_id)
                if followed is not None:
                    return followed
            await self.reconnect()
            if unknown and (answer := await self._stored_answer(message)) is not None:
                self.display.note("pallas chat: the agent had answered before the connection dropped")
                return Turn(_text_result(answer))
            self.display.note("pallas chat: the agent did not answer that message; sending it again")
        raise ChatError(f"lost the connection to {self.agent}: {failure}")

    async def _send_once(self, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        self._task_id = None

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            if message is not None and message.startswith(TASK_PROGRESS_PREFIX):
                self._task_id = message.removeprefix(TASK_PROGRESS_PREFIX)  # the turn's task, not news
                return
            await self.display.progress(progress, total, message)

        with self.display.working():
            return await self.client.call_tool_mcp(
                SEND_MESSAGE,
                arguments,
                progress_handler=progress,
                timeout=self.timeout,
                meta={TOOL_CALLS_META: True, RESUMABLE_META: True},
            )

    async def _follow(self, task_id: str) -> Turn | None:
        """The answer of the turn the agent kept running as task `task_id`, polled on new connections.

        None when the turn was lost with the process that ran it (`TASK_LOST`).

        Raises:
            ChatError: the task could not be followed within the link's retries.
        """
        self.display.note(f"pallas chat: the connection dropped; following the turn (task {task_id})")
        approver: Any = self.link.elicitation  # the terminal's, called as fastmcp calls it

        async def ask(params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
            if approver is None:
                return mcp_types.ElicitResult(action="cancel")
            said = await approver(params.message, None, params, None)
            return mcp_types.ElicitResult(action=said.action, content=said.content)

        async def seen(state: tasks.TaskState) -> None:
            if state.status_message:
                await self.display.progress(0, None, state.status_message)

        last = ""
        for delay in (0.0, *RETRY_DELAYS):
            await asyncio.sleep(delay)
            try:
                transport = StreamableHttpTransport(self.link.url, headers=self.link.headers)
                # 2026-07-28, no session; `tasks/*` need the extension named in each request.
                async with Client(
                    transport, timeout=self.timeout, extensions=[tasks.TasksClient()]
                ) as client:
                    with self.display.working():
                        final = await tasks.poll(client.session, task_id, ask=ask, seen=seen)
                if final.status == "failed" and (final.error or {}).get("message") == TASK_LOST:
                    return None
                return Turn(tasks.outcome(final))
            except MCPError as exc:
                if exc.error.code != CONNECTION_CLOSED:
                    raise ChatError(f"following task {task_id} failed: {exc.error.message}") from None
                last = exc.error.message
            except TRANSPORT_ERRORS as exc:
                last = reason(exc)
        raise ChatError(f"lost the connection to {self.agent} while following task {task_id}: {last}")

    async def _stored_answer(self, message: str) -> str | None:
        """The agent's stored answer to `message` if it is the conversation's last user message.

        A connection that dropped while the agent worked leaves the outcome open: the agent may
        have answered and kept the turn before the answer reached us.
        """
        try:
            lines = await self.messages()
        except ChatError:
            return None
        last_user = max((i for i, (role, _) in enumerate(lines) if role == "user"), default=None)
        if last_user is None or lines[last_user][1] != message:
            return None
        answers = [text for role, text in lines[last_user + 1 :] if role == "assistant"]
        answers = [text for text in answers if not text.startswith(TOOL_ACTIVITY)]
        return "\n".join(answers) if answers else None

    async def tools(self) -> list[mcp_types.Tool]:
        """The agent's MCP tools (listed once per session)."""
        if self._tools is None:
            self._tools = await self._request("tools/list", lambda: self.client.list_tools())
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
        what = f"{self.agent} does not publish its instruction ({INSTRUCTION_URI}): reading it"
        contents = await self._request(what, lambda: self.client.read_resource(INSTRUCTION_URI))
        return text_of(contents)

    async def messages(self) -> list[tuple[str, str]]:
        """This conversation as (role, text) pairs (empty before the first answer)."""
        name = f"{self.agent}_history"

        async def read() -> list[tuple[str, str]]:
            try:
                prompt = await self.client.get_prompt(name, {"conversation_id": self.conversation_id})
            except MCPError as exc:
                if "no stored conversation" in exc.error.message:
                    return []
                raise
            return [(str(m.role), text_of([m.content])) for m in prompt.messages]

        return await self._request(name, read)

    def clear(self) -> None:
        """Start a new conversation (the agent keeps the old one; `/threads` lists it)."""
        self.conversation_id = new_conversation_id()

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """The text of a plain tool call (the conversation tools).

        Raises:
            ChatError: the call failed or answered with an error.
        """
        result = await self._request(
            tool, lambda: self.client.call_tool(tool, arguments, timeout=self.timeout, raise_on_error=False)
        )
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
    display = TurnDisplay(sys.stderr, answer=sys.stdout)
    link = AgentLink(url, headers, wait, elicitation=TerminalApprover(display))
    try:
        await link.connect()
    except MCPError as exc:
        refusal = await _refusal(url, headers, wait)
        raise ChatError(refusal or f"{url} is not an MCP server: {exc.error.message}") from None
    except TRANSPORT_ERRORS as exc:
        refusal = await _refusal(url, headers, wait)
        raise ChatError(f"cannot connect to {url}: {refusal or reason(exc)}") from None
    try:
        client = link.client
        info = client.initialize_result.server_info if client.initialize_result else None
        yield ChatSession(
            link=link,
            agent=info.name if info else "agent",
            display=display,
            timeout=wait,
            conversation_id=conversation_id or new_conversation_id(),
        )
    finally:
        # Ending the session (an HTTP DELETE) is a courtesy: a failure there, say because the
        # agent went away, must not hide the outcome of the chat itself.
        await link.close()


async def _refusal(url: str, headers: dict[str, str], wait: float) -> str | None:
    """What a 401 or 403 of an agent checking callers means, and what to do; None for others.

    The MCP client reports an HTTP error status as a bare "error response"; one plain MCP probe
    of the endpoint tells the statuses apart.
    """
    outcome = await probe(url, time_limit=min(wait, 10.0), headers=headers)
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


def _text_result(text: str) -> mcp_types.CallToolResult:
    """An answer read from the history, shaped as the call's result would have been."""
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)], is_error=False)
