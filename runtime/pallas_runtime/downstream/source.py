"""What the agent loop needs from a source of tools: a downstream MCP server or another agent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pallas_api.errors import ErrorCode
from pallas_runtime.approval.elicit import RELAY_META
from pallas_runtime.approval.question import NO_CHANNEL, Approver
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.downstream.call_path import CallPath
from pallas_runtime.messages import ContentPart
from pallas_runtime.spending import guard as spending

ProgressHandler = Callable[[float, float | None, str | None], Awaitable[None]]
"""(progress, total, message) as received from the downstream server."""

QUALIFIER = "__"


@dataclass(frozen=True, slots=True)
class RemoteTool:
    """A tool of a downstream server or peer agent."""

    source: str
    """The downstream server's or peer agent's name."""
    name: str
    description: str
    input_schema: dict[str, Any]
    destructive: bool = False
    """The server annotates it `destructiveHint: true` (and not `readOnlyHint`): it may approval-gate it."""

    @property
    def qualified_name(self) -> str:
        """What the model sees: `<server>__<tool>`."""
        return f"{self.source}{QUALIFIER}{self.name}"


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call returned."""

    content: tuple[ContentPart, ...]
    is_error: bool = False
    code: ErrorCode | None = None
    """Why an error result failed, when known (a peer agent's result says so)."""
    blocks: tuple[Any, ...] | None = None
    """A downstream server's own content blocks, one per part of `content` (audio, blobs and
    resource links among them), for the gateway's clients; None when the parts are not the server's."""
    structured: dict[str, Any] | None = None
    """The server's `structuredContent`, passed on to the gateway's clients as it came."""


@dataclass(frozen=True, slots=True)
class Onward:
    """What a calling turn hands the source of one tool call (`agent.turn.Turn.onward`).

    Every source gets the same value and takes what it uses: a server the credential, the
    progress handler and (a stateful one) the conversation; a peer agent all of it, and `meta`
    for what travels in its request beside the message.
    """

    credential: str | None = None
    """The caller's `Authorization` value; sent only when the source forwards inbound auth and
    has no explicit Authorization header of its own."""
    on_progress: ProgressHandler | None = None
    """Where the call's own progress notifications go (None: nowhere)."""
    conversation: ConversationKey | None = None
    """The calling turn's conversation: a peer agent is given a conversation id derived from it."""
    call_path: CallPath | None = None
    """The calling turn's path of agents: a peer gets it, and a call that would loop or go too
    deep is refused."""
    budget: spending.TurnBudget | None = None
    """The calling turn's budgets: a peer is told what the root caller has left, and what it
    reports it spent is charged here."""
    approver: Approver = NO_CHANNEL
    """Whom the calling turn asks for approvals: a peer's questions are relayed to it."""
    relay: str | None = None
    """The approval relay token of this call to a peer agent (`approval.elicit.Relays`): set by
    that source when it opens the call, so its questions find their way back to this turn."""
    grant: dict[str, Any] | None = None
    """The budget `_meta` this call to a peer holds of the turn's (`spending.peer_grant`): set by
    that source when it opens the call, so sibling calls of the turn do not pass it on too."""

    def meta(self, peer: str) -> dict[str, Any] | None:
        """What a call to agent `peer` carries besides its message: the one definition of it.

        The path of agents extended by `peer`, what the root caller has left to spend
        (`spending.chain`; a Pallas agent reached over A2A keeps to it too), and the relay token.

        Raises:
            CallRefused: the call would loop back or go deeper than `maxDepth` (it is not sent).
        """
        meta = self.call_path.onward(peer) if self.call_path is not None else None
        if budget := (self.grant if self.grant is not None else spending.onward_meta(self.budget)):
            meta = {**(meta or {}), **budget}
        if self.relay is not None:
            meta = {**(meta or {}), RELAY_META: self.relay}
        return meta


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What a health probe of one source found."""

    source: str
    ok: bool
    message: str = ""
    """Why it failed: `timed out after 3s`, `HTTP 503`, `connection refused`…"""
    note: str = ""
    """What is worth knowing about a source that is up, e.g. `needs caller credentials`."""


class DownstreamError(Exception):
    """A downstream call that could not be made or completed; the text names the source."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.SERVER_UNAVAILABLE) -> None:
        super().__init__(message)
        self.code = code


class DownstreamTimeout(DownstreamError):
    """A downstream call that did not answer within the source's timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.TIMEOUT)


class ToolSource(Protocol):
    """A downstream MCP server or peer agent the agent loop can call."""

    @property
    def name(self) -> str:
        """The source's name, the `<name>` of `<name>__<tool>`."""

    async def list_tools(self, *, inbound_auth: str | None = None) -> list[RemoteTool]:
        """The source's tools, cached; refreshed after tools/list_changed or a failure.

        `inbound_auth` is the caller's `Authorization`, for a source that lists only to callers
        with a bearer (a peer agent checking callers); others ignore it.
        """

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        onward: Onward,
    ) -> ToolOutcome:
        """Call one tool with what the calling turn hands it (`onward`).

        Raises DownstreamError on transport failures and timeouts.
        """

    async def release(self, conversation: ConversationKey) -> None:
        """The conversation ended (deleted, or a turn that keeps none): drop what it holds here.

        A stateful server's session of that conversation is closed; other sources hold nothing.
        """

    async def probe(self) -> ProbeResult:
        """MCP initialize (then DELETE of the session) within the probe timeout; never raises.

        The timeout is `health.probeTimeoutSeconds` (3 s by default).
        """

    async def aclose(self) -> None:
        """Close the source's connections."""
