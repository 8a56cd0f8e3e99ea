"""Which conversation a request continues, and what an anonymous session may see of them.

The scope (docs/api.md §3; the original Pallas's `instance_scope`) decides what a request that
names no `conversation_id` continues:

- `caller`: the caller's one default conversation (id `default`), from any session, across
  reconnects and restarts. Without inbound auth every client is the one anonymous caller, so they
  all share it: a deliberately single-user agent.
- `session`: the MCP session's own conversation. Its id is a digest of the agent and the session
  id, so no output ever carries a session id and no other session can name it.
- `request`: nothing is kept, and a `conversation_id` is ignored.

An explicit `conversation_id` names a conversation of the caller. Without inbound auth there is
no caller identity: such an id is shared by every client that knows it (a bearer name), while
`list_conversations` shows a session only what it started or named itself (`SessionLedger`).
"""

from __future__ import annotations

import hashlib

from cachetools import FIFOCache

from pallas_api.fields import ConversationScope
from pallas_runtime.conversations.caller import ANONYMOUS, Caller
from pallas_runtime.conversations.model import ConversationKey

DEFAULT_ID = "default"
"""The id of a caller's default conversation (`caller` scope)."""
SESSIONS_REMEMBERED = 1000
"""Sessions a ledger remembers by default: an agent keeps `sessions.maxSessions` of them."""
IDS_PER_SESSION = 64
"""Conversation ids (at most 256 characters each) remembered per session: at most ~16 KiB."""


def session_conversation_id(identity: str, session_id: str) -> str:
    """The id of an MCP session's own conversation: nothing of the session id can be read from it."""
    digest = hashlib.sha256(f"{identity}\0{session_id}".encode()).hexdigest()
    return f"session-{digest[:32]}"


def conversation_key(
    identity: str,
    scope: ConversationScope,
    caller: Caller,
    conversation_id: str | None,
    session_id: str | None,
) -> ConversationKey | None:
    """The conversation a request continues, or None when nothing is kept."""
    if scope == "request":
        return None
    if conversation_id:
        return ConversationKey(identity, caller.owner, conversation_id)
    if scope == "caller":
        return ConversationKey(identity, caller.owner, DEFAULT_ID)
    if session_id:
        return ConversationKey(identity, caller.owner, session_conversation_id(identity, session_id))
    return None


def sees_only_its_session(scope: ConversationScope, caller: Caller) -> bool:
    """Whether the caller's listing is limited to what its session started or named.

    An authenticated caller sees all of its own conversations; so does the one anonymous caller
    of a `caller`-scoped agent (which shares everything on purpose). Any other anonymous client
    is told only of its own session's conversations.
    """
    return caller.owner == ANONYMOUS and scope != "caller"


class SessionLedger:
    """The conversations each MCP session started or named, newest last (bounded, in process).

    MCP sessions live in the process that created them, so a session's ledger is wherever its
    requests are served. The oldest sessions and ids are forgotten first.
    """

    def __init__(self, sessions: int = SESSIONS_REMEMBERED, ids: int = IDS_PER_SESSION) -> None:
        # First in, first out: only `note` makes an entry the newest (taken out and put back,
        # so iterating gives the ids oldest first); reading one moves nothing.
        self._sessions: FIFOCache[str, FIFOCache[str, None]] = FIFOCache(maxsize=sessions)
        self._max_ids = ids

    def note(self, session_id: str, conversation_id: str) -> None:
        """Remember that the session started or named the conversation."""
        ids = self._sessions.pop(session_id, None) or FIFOCache(maxsize=self._max_ids)
        ids.pop(conversation_id, None)
        ids[conversation_id] = None
        self._sessions[session_id] = ids

    def forget(self, session_id: str, conversation_id: str) -> None:
        """The conversation was deleted."""
        ids = self._sessions.get(session_id)
        if ids is not None:
            ids.pop(conversation_id, None)

    def ids(self, session_id: str | None) -> list[str]:
        """The session's conversations (none for a request without a session)."""
        return list(self._sessions.get(session_id, ())) if session_id else []

    def knows(self, session_id: str | None, conversation_id: str) -> bool:
        """Whether the session started or named the conversation."""
        return bool(session_id) and conversation_id in self._sessions.get(session_id or "", ())
