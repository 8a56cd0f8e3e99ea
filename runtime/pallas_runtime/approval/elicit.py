"""Approvals over MCP: the served request's client asked, and a peer agent's question relayed.

An agent serving `send_message` asks its own caller with `elicitation/create` on the request's
back channel (`CallerApprover`). When that caller is another Pallas agent, the question must go
further up, to the client that started the whole turn: every call an agent makes to a peer
carries a relay token in its `_meta` (`pallas.dev/approvalRelay`), the peer sends the token back
in its elicitation's `_meta`, and the calling agent's MCP client (`Relays.callback`, the
elicitation handler of its sessions to peers) hands the same question to the approver of the turn
that made the call, then the answer back down. A token names one call in flight, so a session
shared by many turns still relays each question to its own turn's caller.

A caller whose client declared no `elicitation` capability, or whose connection has no channel
for requests from the server (the sessionless 2026-07-28 protocol), is never sent a request it
cannot answer: the question fails at once as `ApprovalUnavailable` with that reason, and a
relaying agent answers its peer with a JSON-RPC error carrying the same reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import mcp_types
from fastmcp import Context
from mcp import MCPError
from mcp.client.session import ClientRequestContext
from mcp.server.session import ServerSession
from mcp.shared.message import ServerMessageMetadata

from pallas_runtime.approval.question import ApprovalUnavailable, Approver

log = logging.getLogger("pallas.approval")

RELAY_META = "pallas.dev/approvalRelay"
"""`_meta` key: on a call to a peer agent, the token its questions come back with; on the peer's
elicitation, that token again."""
MAX_RELAY_SECONDS = 3600.0
"""A relayed question is dropped after this long even if the peer never gave up on it (the
longest `timeoutSeconds` a policy may set)."""
NO_ELICITATION = (
    "the caller's MCP client does not support elicitation (its initialize declared no `elicitation` "
    "capability), so nobody can approve the call"
)
NO_ELICITATION_DECLARED = (
    "the caller's MCP client declared no `elicitation` capability in its request, so nobody can "
    "approve the call"
)
NO_BACK_CHANNEL = (
    "the caller's MCP connection (protocol {version}) carries no requests from server to client, so "
    "nobody can approve the call (approvals need a session of the 2025-06-18 or 2025-11-25 protocol)"
)


class CallerApprover:
    """Asks the client of the MCP request being served, on that request's back channel."""

    def __init__(self, session: ServerSession, request_id: mcp_types.RequestId, relay: str | None) -> None:
        """Ask on `session`, related to request `request_id`, sending `relay` back with questions.

        `relay` is the token the request carried when its client is a calling agent.
        """
        self._session = session
        self._request_id = request_id
        self._relay = relay

    async def elicit(self, params: mcp_types.ElicitRequestFormParams) -> mcp_types.ElicitResult:
        """Send the question to the client; its result.

        Raises:
            ApprovalUnavailable: the client supports no elicitation, or answered with an error.
        """
        if not self._session.can_send_request:
            raise ApprovalUnavailable(NO_BACK_CHANNEL.format(version=self._session.protocol_version))
        capabilities = self._session.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            raise ApprovalUnavailable(NO_ELICITATION)
        meta: dict[str, Any] = {k: v for k, v in (params.meta or {}).items() if k != RELAY_META}
        if self._relay is not None:
            meta[RELAY_META] = self._relay
        request = mcp_types.ElicitRequest(params=params.model_copy(update={"meta": meta}))
        try:
            return await self._session.send_request(
                request,
                mcp_types.ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=self._request_id),
            )
        except MCPError as exc:
            raise ApprovalUnavailable(exc.message) from None


def caller_approver(ctx: Context) -> Approver | None:
    """The approver of the MCP request `ctx` serves; None outside a request."""
    request = ctx.request_context
    if request is None:
        return None
    meta = request.meta if isinstance(request.meta, dict) else {}
    relay = meta.get(RELAY_META)
    return CallerApprover(ctx.session, ctx.request_id, relay if isinstance(relay, str) and relay else None)


class Relays:
    """The calls to one peer agent in flight, each with the approver its questions go to."""

    def __init__(self, peer: str) -> None:
        self._peer = peer
        self._open: dict[str, Approver] = {}

    @contextlib.contextmanager
    def open(self, approver: Approver) -> Iterator[str]:
        """A token for one call: its questions go to `approver` until the block ends.

        The call carries the token in its `_meta` (`downstream.source.Onward.relay`).
        """
        token = secrets.token_urlsafe(18)
        self._open[token] = approver
        try:
            yield token
        finally:
            self._open.pop(token, None)

    async def callback(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        """The elicitation handler of this agent's sessions to the peer: relay, or say why not."""
        token = (context.meta or {}).get(RELAY_META)
        approver = self._open.get(token) if isinstance(token, str) else None
        if approver is None:
            return _refused(f"no call to agent {self._peer} is waiting for this question")
        if not isinstance(params, mcp_types.ElicitRequestFormParams):
            return _refused("only form elicitations (approvals) are relayed")
        try:
            async with asyncio.timeout(MAX_RELAY_SECONDS):
                return await approver.elicit(params)
        except ApprovalUnavailable as exc:
            return _refused(str(exc))
        except TimeoutError:
            return _refused(f"no answer within {MAX_RELAY_SECONDS:g}s")


def _refused(message: str) -> mcp_types.ErrorData:
    return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=message)
