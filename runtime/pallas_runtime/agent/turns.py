"""A `send_message` turn over a conversation store: the key, the hold, the loop, the commit.

Which conversation a request continues is the scope's (`conversations.scope`): an explicit
`conversation_id`, else the caller's default conversation, else the MCP session's, else none
(nothing kept). It belongs to the caller. The turn holds the conversation from reading its
history to storing the turn, so turns of one conversation run one at a time wherever they run;
a turn cancelled by its caller stores nothing. A turn that fails (`failure.failure_of`) is kept
as the rounds it ran (its user message, then each assistant and tool message) and a
`TurnFailure`; one a stopping agent interrupts (`inflight`), as its user message and the failure.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from cachetools import LRUCache

from pallas_api.fields import ConversationScope
from pallas_runtime.agent.failure import failure_of
from pallas_runtime.agent.loop import AgentLoop, rounds_run
from pallas_runtime.agent.turn import Turn
from pallas_runtime.conversations.caller import Caller, keeps_nothing, one_turn_key
from pallas_runtime.conversations.history import title_of
from pallas_runtime.conversations.model import (
    ConversationKey,
    ConversationStore,
    StoreUnavailable,
    ThreadInfo,
    TurnLost,
)
from pallas_runtime.conversations.model import Turn as HeldTurn  # the store's hold of one turn
from pallas_runtime.conversations.scope import (
    SESSIONS_REMEMBERED,
    SessionLedger,
    conversation_key,
    sees_only_its_session,
)
from pallas_runtime.inflight import InFlight, ShuttingDown
from pallas_runtime.messages import Message, TurnFailure, UserMessage

SETTINGS_REMEMBERED = 4096
"""Conversations whose settings (or their absence) a process remembers (a few hundred bytes each)."""


class NoConversation(ValueError):
    """A history or delete request that names no conversation of this caller."""


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer of one turn, and the conversation it was stored in (None: not kept)."""

    text: str
    conversation_id: str | None
    turn: Sequence[Message] = ()
    """The turn's messages (the user message, then every assistant and tool message)."""
    created: bool = False
    """This turn started the conversation."""
    history_left_out: int = 0
    """Oldest stored messages the turn's model calls left out to fit the context window."""
    spent: tuple[int, int] | None = None
    """Tokens and cost (micros) the turn spent, for a calling agent (None: none asked)."""
    turn_index: int = 0
    """The turn's place among its stored conversation's turns, from 0 (0: kept nowhere)."""


class Conversations:
    """What the agent's MCP surface does with conversations."""

    def __init__(
        self,
        identity: str,
        scope: ConversationScope,
        store: ConversationStore,
        *,
        sessions: int = SESSIONS_REMEMBERED,
        inflight: InFlight | None = None,
        forget: Callable[[ConversationKey], Awaitable[None]] | None = None,
    ) -> None:
        self._identity = identity
        self._scope = scope
        self.store = store
        self._inflight = inflight
        self._forget = forget
        # As many sessions as the agent keeps open: a closed one's entry is the oldest to go.
        self._ledger = SessionLedger(sessions=sessions)
        self._settings: LRUCache[ConversationKey, dict[str, str]] = LRUCache(maxsize=SETTINGS_REMEMBERED)

    def _key(
        self, caller: Caller, conversation_id: str | None, session_id: str | None
    ) -> ConversationKey | None:
        key = conversation_key(self._identity, self._scope, caller, conversation_id, session_id)
        if key is not None and session_id:
            self._ledger.note(session_id, key.id)
        return key

    async def send(
        self,
        loop: AgentLoop,
        turn: Turn,
        user: UserMessage,
        *,
        conversation_id: str | None,
        session_id: str | None,
        history: Sequence[Message] | None = None,
    ) -> Reply:
        """Run one turn on `loop`; store it when the scope keeps a conversation for the request.

        The turn runs in the conversation the scope picks for its caller (`turn.conversation`
        is set here). A `history` the call brought (`params.messages`) replaces a stored one:
        the turn runs over it as a conversation of one turn, and nothing is read or kept.

        Raises:
            ConversationBusy, StoreUnavailable, TurnLost: from the store (nothing stored).
            LLMError, MaxIterationsExceeded, BudgetExceeded, StepFailed: from the loop (kept as
                failed, see `failure.failure_of`, when a conversation is kept).
            ShuttingDown: a stopping agent interrupted the turn (kept as failed when `kept`).
        """
        kept = history is None and not keeps_nothing(conversation_id)
        key = self._key(turn.caller, conversation_id, session_id) if kept else None
        if key is None:
            key = one_turn_key(self._identity, turn.caller.owner)
            try:
                result = await loop.run(list(history or ()), user, replace(turn, conversation=key))
            finally:
                await loop.tools.release(key)  # a conversation of one turn ends with it
            return Reply(result.text, None, result.messages, history_left_out=result.history_left_out)
        async with self.store.turn(key) as held:
            try:
                result = await loop.run(held.history, user, replace(turn, conversation=key))
            except asyncio.CancelledError:
                failure = self._inflight.take_interruption() if self._inflight else None
                if failure is None:
                    raise
                raise await self._kept_as_failed(held, user, failure) from None
            except Exception as exc:
                failed = failure_of(exc)
                if failed is not None:  # kept with the rounds it ran; the caller hears of it itself
                    await _keep_failed(held, rounds_run(exc) or (user,), failed)
                raise
            if self._inflight is not None:
                self._inflight.finishing()
            await held.commit(result.messages, title_of([user]))
        return Reply(
            result.text, key.id, result.messages, created=not held.history,
            history_left_out=result.history_left_out,
            turn_index=sum(isinstance(m, UserMessage) for m in held.history),
        )  # fmt: skip

    async def _kept_as_failed(self, held: HeldTurn, user: UserMessage, failure: TurnFailure) -> ShuttingDown:
        """Keep an interrupted turn as its user message and the failure; the error its caller gets."""
        assert self._inflight is not None
        return self._inflight.interrupted_error(kept=await _keep_failed(held, (user,), failure))

    async def history(
        self, caller: Caller, conversation_id: str | None, session_id: str | None
    ) -> list[Message]:
        """The caller's stored conversation.

        Raises:
            NoConversation: none named, or none stored under that name for this caller.
        """
        key = self._key(caller, conversation_id, session_id)
        if key is None:
            if self._scope == "request":
                raise NoConversation("this agent keeps no conversations (its conversation scope is request)")
            raise NoConversation(
                "no conversation: this agent keeps one per MCP session and this request has no session; "
                "pass conversation_id"
            )
        messages = await self.store.history(key)
        if messages is None:
            what = f"conversation_id {conversation_id!r}" if conversation_id else _default_name(self._scope)
            raise NoConversation(f"no stored conversation for {what} yet")
        return messages

    async def create(
        self, caller: Caller, session_id: str | None, settings: Mapping[str, str], title: str
    ) -> str:
        """A new conversation of the caller, kept with its settings; its id.

        The id is made here (never the client's), so no id a turn already used, or another
        replica cached as having no settings, can ever be created again with some.

        Raises:
            NoConversation: the scope keeps nothing (`request`).
            StoreUnavailable: from the store.
        """
        if self._scope == "request":
            raise NoConversation("this agent keeps no conversations (its conversation scope is request)")
        conversation_id = f"c-{uuid.uuid4().hex}"
        key = ConversationKey(self._identity, caller.owner, conversation_id)
        await self.store.create(key, settings, title)
        self._settings[key] = dict(settings)
        if session_id:
            self._ledger.note(session_id, conversation_id)
        return conversation_id

    async def settings(self, caller: Caller, conversation_id: str) -> dict[str, str]:
        """What the caller's conversation was created with (empty: nothing, or not created).

        Settings never change once created and ids are never created twice (`create`), so what
        was read (also that there are none) is remembered: a turn of a database store pays no
        extra round trip after the first.
        """
        key = ConversationKey(self._identity, caller.owner, conversation_id)
        found = self._settings.get(key)
        if found is None:
            found = await self.store.settings(key) or {}
            self._settings[key] = found
        return found

    async def threads(self, caller: Caller, session_id: str | None) -> list[ThreadInfo]:
        """The conversations the caller may see, most recent first."""
        if self._scope == "request":
            return []
        if sees_only_its_session(self._scope, caller):
            ids = self._ledger.ids(session_id)
            return await self.store.threads(self._identity, caller.owner, only=ids) if ids else []
        return await self.store.threads(self._identity, caller.owner)

    async def delete(self, caller: Caller, conversation_id: str, session_id: str | None) -> None:
        """Forget one of the caller's conversations.

        Raises:
            NoConversation: the caller has no conversation of that id (an anonymous client: none
                its session started or named).
        """
        missing = NoConversation(f"no stored conversation for conversation_id {conversation_id!r}")
        if sees_only_its_session(self._scope, caller) and not self._ledger.knows(session_id, conversation_id):
            raise missing
        key = ConversationKey(self._identity, caller.owner, conversation_id)
        self._settings.pop(key, None)
        if not await self.store.delete(key):
            raise missing
        if session_id:
            self._ledger.forget(session_id, conversation_id)
        if self._forget is not None:
            await self._forget(key)  # a stateful server's session of it ends too


async def _keep_failed(held: HeldTurn, ran: Sequence[Message], failure: TurnFailure) -> bool:
    """Keep a failed turn as what it ran (its user message first) and the failure; False: the store could not.

    The caller hears of the turn's failure either way: a store that cannot keep it now changes
    the failure at most in whether it says the turn was kept.
    """
    try:
        await held.commit([*ran, failure], title_of(ran))
    except (StoreUnavailable, TurnLost):
        return False
    return True


def _default_name(scope: ConversationScope) -> str:
    return "your default conversation" if scope == "caller" else "this MCP session"
