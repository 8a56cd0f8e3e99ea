"""Soak clients: callers of their own identity holding conversations with the orchestrator.

Each `Caller` is one user: an OIDC subject (`soak-<name>`) with a token of its own, a secret it
puts in every message, and conversations of `turns` messages each (explicit conversation ids,
kept by caller scope), sent at a steady pace. Half the callers ask for delegation, so their turns
go orchestrator → researcher → orchestrator. Every attempt is recorded as a `Send`: when it
started and ended, and either the error code (the agent's `structuredContent.error.code`, or what
the transport said) or the verdict of the fake LLM (`script.Verdict`).

A caller reconnects as a real client does. When its session is unknown to the pod it reaches
(HTTP 404: the session was closed, and the message was not taken; a pod that never had it takes
it on instead, docs/runtime.md), it starts a new session
and sends the message on it, as the MCP specification tells a client to (the send counts as
`resumed`, not failed). After any other error that is not an answer (a dropped connection, a
timeout) it drops its session and opens a new one for the next message. Its conversations
continue by id (caller scope). `check_histories` reads the orchestrator's
`orchestrator_history` prompt for conversations and reports acknowledged turns it lacks (lost)
and other callers' secrets in it (leaks).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp.shared.exceptions import MCPError

from tests.support.soak.script import ORCHESTRATOR, Turn, Verdict, secret_owners

HISTORY_PROMPT = f"{ORCHESTRATOR}_history"
NO_HISTORY = "no stored conversation"
"""The history prompt's error when a conversation has nothing stored (every turn of it lost)."""

RETRYABLE = frozenset(
    {
        "SERVER_UNAVAILABLE",  # the agent's own: store unreachable, lease lost, shutting down
        "TIMEOUT",  # the agent's own: waited behind the conversation's previous turn
        "PEER_FAILED",  # the delegated part failed with one of these
        "CONNECT_FAILED",
        "CONNECTION_LOST",
        "SESSION_LOST",
        "CLIENT_TIMEOUT",
        "HTTP_503",
    }
)
"""Codes a client may retry as they are: the message was not taken, nothing is half-done."""


@dataclass(frozen=True)
class Send:
    """One attempt to send a message."""

    caller: str
    conversation: str
    turn: int
    delegate: bool
    started: float
    ended: float
    code: str | None
    """None: answered; else why not."""
    verdict: Verdict | None = None
    detail: str = ""
    """What the error said (the first 300 characters), with its transport's error if it had one."""
    resumed: bool = False
    """Its session was gone (HTTP 404): the caller opened a new one and sent the message again."""

    @property
    def ok(self) -> bool:
        return self.code is None

    @property
    def latency(self) -> float:
        return self.ended - self.started


@dataclass
class Conversation:
    """One conversation of a caller, as the caller saw it."""

    id: str
    attempts: int = 0
    acked: dict[int, float] = field(default_factory=dict)
    """Turn → when its answer arrived."""
    delegated: list[int] = field(default_factory=list)
    touched: float = 0.0
    """When its last attempt ended."""


@dataclass(frozen=True)
class Loss:
    """An acknowledged turn the history does not hold."""

    caller: str
    conversation: str
    turn: int
    acked_at: float


@dataclass
class HistoryCheck:
    """What reading histories back found."""

    lost: list[Loss] = field(default_factory=list)
    leaks: list[tuple[str, str, float]] = field(default_factory=list)
    """(caller, whose secret, when) for each foreign secret found in a caller's history."""
    unverified: list[str] = field(default_factory=list)
    """Conversations whose history could not be read."""

    def extend(self, other: HistoryCheck) -> None:
        self.lost += other.lost
        self.leaks += other.leaks
        self.unverified += other.unverified


def first_cause(exc: BaseException) -> BaseException:
    """The first exception inside nested exception groups (a task group's), else `exc`."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def classify(exc: BaseException) -> str:
    """An error code for an exception a send raised (the transport's, not the agent's)."""
    exc = first_cause(exc)
    text = str(exc).lower()
    if isinstance(exc, TimeoutError) or "timed out" in text or "timeout" in text:
        return "CLIENT_TIMEOUT"
    if isinstance(exc, httpx2.ConnectError) or ("connect" in text and "refused" in text):
        return "CONNECT_FAILED"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP_{exc.response.status_code}"
    if isinstance(exc, httpx2.TransportError):
        return "CONNECTION_LOST"
    if isinstance(exc, MCPError):
        if "session terminated" in text or "session not found" in text:
            return "SESSION_LOST"  # the pod that held the session is gone: a 404 from its successor
        if "503" in text or "unavailable" in text:
            return "HTTP_503"
        if "connection" in text or "stream" in text or "closed" in text:
            return "CONNECTION_LOST"
        return "MCP_ERROR"
    return type(exc).__name__


def error_code(result: Any) -> str:
    """The code of an error result (`structuredContent.error.code`), or `ERROR_RESULT`."""
    structured = getattr(result, "structured_content", None) or {}
    error = structured.get("error") if isinstance(structured, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return str(code) if code else "ERROR_RESULT"


def text_of_result(result: Any) -> str:
    return "".join(str(getattr(part, "text", "")) for part in getattr(result, "content", None) or [])


class Caller:
    """One user with an identity of its own, talking to the orchestrator at a steady pace."""

    def __init__(
        self,
        name: str,
        url: str,
        token: Callable[[], str],
        *,
        run_id: str,
        delegate: bool,
        turns: int,
        timeout: float,
        record: Callable[[Send], None],
        secret: str,
    ) -> None:
        self.name = name
        self.url = url
        self._token = token
        self.run_id = run_id
        self.delegate = delegate
        self.turns = turns
        self.timeout = timeout
        self._record = record
        self.secret = secret
        self.conversations: list[Conversation] = []
        self._session: Client[Any] | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self.sessions_opened = 0

    # --- the session --------------------------------------------------------------------------

    def _client(self) -> Client[Any]:
        transport = StreamableHttpTransport(self.url, auth=self._token())
        return Client(transport, mode="legacy", timeout=self.timeout, init_timeout=self.timeout)

    async def _connected(self) -> Client[Any]:
        if self._session is None:
            stack = contextlib.AsyncExitStack()
            try:
                session = await stack.enter_async_context(self._client())
            except BaseException:
                await self._close(stack)
                raise
            self._session, self._stack = session, stack
            self.sessions_opened += 1
        return self._session

    async def disconnect(self) -> str:
        """Drop the MCP session (a new one is opened for the next message).

        Returns what its transport had failed with, if anything ("" otherwise): the MCP client
        says only "Connection closed" for a request whose HTTP exchange failed.
        """
        stack, self._session, self._stack = self._stack, None, None
        return "" if stack is None else await self._close(stack)

    @staticmethod
    async def _close(stack: contextlib.AsyncExitStack) -> str:
        # Closing says goodbye to a server that may be gone: bounded, and never an error.
        try:
            await asyncio.wait_for(stack.aclose(), 5)
        except (Exception, asyncio.CancelledError) as exc:
            cause = first_cause(exc)
            return f"{type(cause).__name__}: {cause}"
        return ""

    # --- talking ------------------------------------------------------------------------------

    def _conversation(self) -> Conversation:
        if not self.conversations or self.conversations[-1].attempts >= self.turns:
            number = len(self.conversations) + 1
            self.conversations.append(Conversation(f"soak-{self.run_id}-{self.name}-k{number}"))
        return self.conversations[-1]

    async def send_one(self) -> Send:
        """Send the next message of the current conversation and record what happened."""
        conversation = self._conversation()
        conversation.attempts += 1
        turn = Turn(
            self.name,
            conversation.id,
            conversation.attempts,
            self.secret,
            acked=tuple(conversation.acked),
            delegated=tuple(conversation.delegated),
            delegate=self.delegate,
        )
        started = time.monotonic()
        code: str | None = None
        verdict: Verdict | None = None
        detail = ""
        resumed = False
        arguments = {"message": turn.text(), "conversation_id": conversation.id}
        try:
            try:
                result = await self._call(arguments)
            except MCPError as exc:
                if classify(exc) != "SESSION_LOST":
                    raise
                # The session was closed and the message was not taken (404): what an MCP
                # client must do, start a new session, and send the message on it.
                await self.disconnect()
                resumed = True
                result = await self._call(arguments)
        except Exception as exc:
            code, detail = classify(exc), f"{type(exc).__name__}: {exc}"
            if cause := await self.disconnect():
                detail += f" (the transport: {cause})"
            detail = detail[:300]
        else:
            answer = text_of_result(result)
            if result.is_error:
                code, detail = error_code(result), answer[:200]
            elif (verdict := Verdict.parse(answer)) is None or verdict.turn != turn.number:
                code, detail = "UNEXPECTED_ANSWER", answer[:200]
            elif verdict.research == "failed":
                code, detail = "PEER_FAILED", verdict.research_error[:200]
        ended = time.monotonic()
        conversation.touched = ended
        if code is None:
            conversation.acked[turn.number] = ended
            if self.delegate:
                conversation.delegated.append(turn.number)
        send = Send(
            self.name,
            conversation.id,
            turn.number,
            self.delegate,
            started,
            ended,
            code,
            verdict,
            detail,
            resumed,
        )
        self._record(send)
        return send

    async def _call(self, arguments: dict[str, Any]) -> Any:
        session = await self._connected()
        return await session.call_tool("send_message", arguments, raise_on_error=False, timeout=self.timeout)

    async def run(self, period: float, offset: float, stop: asyncio.Event, budget: Budget) -> None:
        """Send a message every `period` seconds (from `offset`), one at a time, until `stop`."""
        due = time.monotonic() + offset
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, due - time.monotonic()))
                if stop.is_set() or not budget.take():
                    break
                await self.send_one()
                due = max(due + period, time.monotonic())
        finally:
            await self.disconnect()

    # --- reading back -------------------------------------------------------------------------

    async def check_histories(self, conversations: Iterable[Conversation], attempts: int = 4) -> HistoryCheck:
        """Read each conversation's history (a session of its own) and compare with what was
        acknowledged; a history that cannot be read is tried again, then left unverified."""
        found = HistoryCheck()
        for conversation in conversations:
            # What was acknowledged before the read starts: the traffic goes on meanwhile, and a
            # turn answered while the history request is in flight need not be in its answer.
            acked = dict(conversation.acked)
            if not acked:
                continue
            texts: list[str] | None = None
            for attempt in range(attempts):
                try:
                    texts = await self._history(conversation.id)
                    break
                except Exception:
                    await asyncio.sleep(1.0 + attempt)
            if texts is None:
                found.unverified.append(conversation.id)
                continue
            present = {
                t.number
                for t in (Turn.parse(text) for text in texts)
                if t is not None and (t.caller, t.conversation) == (self.name, conversation.id)
            }
            found.lost += [
                Loss(self.name, conversation.id, n, at) for n, at in acked.items() if n not in present
            ]
            owners = secret_owners("\n".join(texts)) - {self.name}
            found.leaks += [(self.name, owner, conversation.touched) for owner in sorted(owners)]
        return found

    async def _history(self, conversation: str) -> list[str]:
        try:
            async with self._client() as session:
                prompt = await session.get_prompt(HISTORY_PROMPT, {"conversation_id": conversation})
        except MCPError as exc:
            if NO_HISTORY in str(exc):
                return []
            raise
        return [str(getattr(m.content, "text", "")) for m in prompt.messages]


class Budget:
    """At most `sends` attempts in all (the soak is bounded in requests as well as in time)."""

    def __init__(self, sends: int) -> None:
        self.left = sends

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True

    @property
    def exhausted(self) -> bool:
        return self.left <= 0
