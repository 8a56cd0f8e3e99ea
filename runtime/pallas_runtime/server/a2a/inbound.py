"""Who an A2A request comes from, read once where the HTTP request is at hand.

The SDK runs the turn in a task of its own, so what the turn needs from the request (the caller,
the credential the agent sends on) is read by the call-context builder, in the request, and
travels in the `ServerCallContext`. The task store keys tasks by the caller's owner
(`conversations.caller`): one caller never reads or cancels another's task.
"""

from __future__ import annotations

from dataclasses import dataclass

from a2a.auth.user import User
from a2a.extensions.common import HTTP_EXTENSION_HEADER, get_requested_extensions
from a2a.server.context import ServerCallContext
from a2a.server.routes import ServerCallContextBuilder
from starlette.requests import Request

from pallas_runtime.conversations.caller import Caller, current_caller
from pallas_runtime.edge.credential import forwarded_credential

INBOUND = "pallas.inbound"
"""The `ServerCallContext.state` key of the request's `Inbound`."""
STREAMING = "pallas.streaming"
"""The `ServerCallContext.state` key set for `SendStreamingMessage` (progress goes out)."""


@dataclass(frozen=True, slots=True)
class Inbound:
    """The caller of an A2A request and the `Authorization` the agent sends on for it."""

    caller: Caller
    credential: str | None


class CallerUser(User):
    """The SDK's view of the caller: its name is the owner the task store keys tasks by."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    @property
    def is_authenticated(self) -> bool:
        """Whether the agent verified the caller (anonymous callers of an open agent are not)."""
        return self._caller.subject is not None

    @property
    def user_name(self) -> str:
        """`sub:<subject>` or `anonymous`."""
        return self._caller.owner


class InboundContext(ServerCallContextBuilder):
    """Builds each request's `ServerCallContext` with its caller and credential."""

    def __init__(self, *, verified: bool) -> None:
        self._verified = verified

    def build(self, request: Request) -> ServerCallContext:
        """The context of `request` (run in the request, where the access token is known)."""
        caller = current_caller()
        if self._verified:
            credential = forwarded_credential(verified=True)
        else:  # an open agent forwards the one header sent (`SingleCredential` admits no second)
            credential = request.headers.get("authorization")
        return ServerCallContext(
            user=CallerUser(caller),
            # The SDK reads the protocol version (`A2A-Version`) from here; the credential is in
            # `Inbound` alone.
            state={INBOUND: Inbound(caller, credential), "headers": _without_credential(request)},
            requested_extensions=get_requested_extensions(request.headers.getlist(HTTP_EXTENSION_HEADER)),
        )


def _without_credential(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.headers.items() if k != "authorization"}


def streams(context: ServerCallContext) -> bool:
    """Whether the caller follows the turn as it goes (`SendStreamingMessage`)."""
    return context.state.get(STREAMING) is True


def inbound_of(context: ServerCallContext) -> Inbound:
    """The request's `Inbound` (anonymous, no credential, for a context not built here)."""
    inbound = context.state.get(INBOUND)
    return inbound if isinstance(inbound, Inbound) else Inbound(Caller("anonymous"), None)
