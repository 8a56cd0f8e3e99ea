"""Who is calling, and the conversation ids an agent hands on to its peers.

The caller is the authenticated subject when inbound auth is on (fastmcp's access token for the
request: `claims["sub"]`, else its `client_id`), otherwise the one anonymous caller. A
conversation belongs to its caller: keys carry the owner, so one caller can never read, extend,
list or delete another's.

A peer call carries a conversation id derived from the caller's conversation and identity and
the peer's name: the peer keeps context per caller conversation, and two callers never share a
peer conversation even when every peer call travels on one MCP session.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from fastmcp.server.dependencies import get_access_token

from pallas_runtime.conversations.model import MAX_ID_LENGTH, ConversationKey

ANONYMOUS = "anonymous"
_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]+$")


@dataclass(frozen=True, slots=True)
class Caller:
    """The subject a request acts for."""

    owner: str
    """`sub:<subject>` or `anonymous` (how stores key conversations)."""
    subject: str | None = None
    groups: tuple[str, ...] = ()


def current_caller() -> Caller:
    """The caller of the request being handled (anonymous without an access token)."""
    token = get_access_token()
    if token is None:
        return Caller(ANONYMOUS)
    claims = token.claims or {}
    subject = str(claims.get("sub") or token.client_id or "")
    if not subject:
        return Caller(ANONYMOUS)
    groups = claims.get("groups") or ()
    return Caller(
        f"sub:{subject}", subject, tuple(str(g) for g in groups) if isinstance(groups, list) else ()
    )


def checked_id(conversation_id: str) -> str:
    """The id as given, or a ValueError naming the rule it breaks."""
    if len(conversation_id) > MAX_ID_LENGTH:
        raise ValueError(
            f"conversation_id is {len(conversation_id)} characters long; the limit is {MAX_ID_LENGTH}"
        )
    if not _PRINTABLE.match(conversation_id):
        raise ValueError("conversation_id must be printable text without control characters")
    return conversation_id


ONE_TURN_PREFIX = "once-"
"""How a conversation id of one turn starts: a turn given such an id keeps nothing."""


def one_turn_key(agent: str, owner: str) -> ConversationKey:
    """A key for a turn that keeps no conversation: its peers keep nothing either."""
    return ConversationKey(agent, owner, f"{ONE_TURN_PREFIX}{secrets.token_hex(12)}")


def keeps_nothing(conversation_id: str | None) -> bool:
    """Whether a request's `conversation_id` is one turn's (a peer call of a turn keeping none)."""
    return conversation_id is not None and conversation_id.startswith(ONE_TURN_PREFIX)


def kept_id(key: ConversationKey | None) -> str | None:
    """The id of the conversation a turn is kept in; None for a turn that keeps none."""
    if key is None or key.id.startswith(ONE_TURN_PREFIX):
        return None
    return key.id


def peer_conversation_id(key: ConversationKey, peer: str) -> str:
    """The conversation id to pass to `peer` for a turn of conversation `key`.

    It names the calling agent (by name: `key.agent` is its identity, `<namespace>/<deployment>/
    <name>[/<uid>]`, or a bare name) and nothing a reader could turn back into the caller.

    A turn that keeps no conversation hands on an id of one turn (`once-…`): the peer keeps
    nothing either, rather than a conversation nobody can ever continue (a store write per peer
    call, and a row left behind, for every such turn).
    """
    digest = hashlib.sha256("\0".join((key.agent, key.owner, key.id, peer)).encode()).hexdigest()
    parts = key.agent.split("/")
    once = ONE_TURN_PREFIX if kept_id(key) is None else ""
    return f"{once}pallas-{parts[2] if len(parts) >= 3 else parts[0]}-{digest[:32]}"
