"""The agent's MCP sessions: a cap per agent and per caller, and room made instead of refusal.

The MCP SDK keeps up to 10,000 sessions per process for 30 idle minutes each and answers 503
to anyone once they are taken: ~10,000 `initialize` calls (40 s of one client's work) locked
every new client out for half an hour, and held ~400 MB (an idle session holds ~40 KiB). Here
the cap and the idle timeout come from the agent's `spec.sessions`, and a full table closes the
session idle longest to make room, so a flood of opened-and-forgotten sessions only ever
displaces itself. With inbound auth each caller also has a cap of its own, enforced the same way
on its own sessions, so one caller cannot crowd out the others.

"Idle" means no request in flight: a session in the middle of a call is never closed under it.
A standing notification stream (GET) is not a request in flight; it counts as activity when it
opens. A newcomer is refused (the SDK's 503) only when every session it could displace is busy.

A request of a session another replica opened is served on a session taken on under the same id
(`session_adoption`), admitted like a newcomer; ids this process closed stay closed (404).

fastmcp 4.1.2 builds its session manager inside the HTTP app's lifespan and exposes neither the
class nor `max_sessions`; `serve_sessions` gives the app an equivalent lifespan that builds a
`SessionTable` (a subclass of fastmcp's manager) instead. What it overrides of the SDK's manager
are its admission, request and discard steps (`_admit_session`, `_handle_stateful_request`,
`_serve_opening_request`, `_discard_session`) and the constructor arguments of its transport,
kept small; the tests in
tests/integration/security/test_sessions.py fail if an SDK upgrade changes them underneath.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.http import FastMCPStreamableHTTPSessionManager, StreamableHTTPASGIApp
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    AuthorizationContext,
    authorization_context,
)
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from pallas_api.fields import SessionLimits
from pallas_runtime.edge.session_adoption import (
    EndedSessions,
    adoptable_protocol,
    answer_taking_on,
    request_header,
    start_taken_on,
)

log = logging.getLogger("pallas.sessions")

Caller = tuple[str, str | None, str | None]
"""Who opened a session: the SDK's (client id, issuer, subject) of the access token."""


@dataclass(slots=True)
class _Activity:
    """One open session's requests in flight and when it was last used."""

    caller: Caller | None
    in_flight: int = 1
    """The request that opens a session is in flight until it is answered."""
    last_used: float = field(default_factory=time.monotonic)


class SessionTable(FastMCPStreamableHTTPSessionManager):
    """fastmcp's session manager with `spec.sessions`' caps, idle timeout and eviction."""

    def __init__(
        self,
        limits: SessionLimits,
        agent: str,
        holds_nothing: Callable[[str], bool] | None = None,
        **options: Any,
    ) -> None:
        """`holds_nothing(session)` says a session is cheap to close (made room from first)."""
        super().__init__(session_idle_timeout=limits.idle_timeout_seconds, **options)
        self._holds_nothing = holds_nothing or (lambda _: False)
        self.max_sessions = self._max_sessions = limits.max_sessions
        self._per_caller = limits.max_per_caller
        self._agent = agent
        self._activity: dict[str, _Activity] = {}
        self._by_caller: dict[Caller, set[str]] = {}
        self._ended = EndedSessions()
        self._taking_on = True
        """Sessions of other replicas are taken on until the table closes its own (a drain's end)."""

    # --- admission (the SDK calls it under its session-creation lock) -----------------------

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        if not self._make_room(_caller(requestor)):
            return None  # every session is busy: the SDK logs it and answers 503
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._admitted(transport.mcp_session_id, _caller(requestor))
        return transport

    def _make_room(self, caller: Caller | None) -> bool:
        """Whether one more session fits, once the caller's and the table's idlest made room."""
        if caller is not None:
            own = self._by_caller.get(caller, set())
            if len(own) >= self._per_caller and not self._close_idlest(own, "sessions.maxPerCaller"):
                log.warning(
                    "refused a new MCP session: the caller's %d sessions are all busy",
                    len(own), extra={"agent": self._agent},
                )  # fmt: skip
                return False
        full = len(self._server_instances) >= self._max_sessions
        return not full or self._close_idlest(self._server_instances, "sessions.maxSessions")

    def _admitted(self, session: str, caller: Caller | None) -> None:
        self._activity[session] = _Activity(caller)
        if caller is not None:
            self._by_caller.setdefault(caller, set()).add(session)

    def _close_idlest(self, sessions: Iterable[str], limit: str) -> bool:
        """Close the session among `sessions` unused longest with nothing in flight; whether one was.

        A session that holds nothing goes first, however recently used: a bridge's health probe
        that ran out of time before its DELETE leaves a session with no server behind it, and
        making room by the clock alone closed the agent's own session instead (its server lost).
        """
        idle = [
            (not self._holds_nothing(session), activity.last_used, session)
            for session in sessions
            if (activity := self._activity.get(session)) is not None and not activity.in_flight
        ]
        if not idle:
            return False
        _, last_used, session = min(idle)
        transport = self._server_instances.get(session)
        self._forget(session)
        log.info(
            "closed an MCP session idle for %.0fs to make room (%s)",
            time.monotonic() - last_used, limit, extra={"agent": self._agent},
        )  # fmt: skip
        task_group: Any = self._task_group  # the SDK types it None until run() sets it
        if transport is not None and task_group is not None:
            # Ends its message loop and notification stream; its ID answers 404 from now on.
            task_group.start_soon(self._discard_session, session, transport)
        return True

    def _forget(self, session: str, *, ended: bool = True) -> None:
        """Stop tracking `session`; an `ended` one (closed, not abandoned) is not taken on again."""
        if self._server_instances.pop(session, None) is not None and ended:
            self._ended.add(session)
        self._session_owners.pop(session, None)
        activity = self._activity.pop(session, None)
        if activity is not None and activity.caller is not None:
            own = self._by_caller.get(activity.caller)
            if own is not None:
                own.discard(session)
                if not own:
                    del self._by_caller[activity.caller]

    # --- activity ---------------------------------------------------------------------------

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = request_header(scope, MCP_SESSION_ID_HEADER)
        activity = self._activity.get(session) if session is not None else None
        if activity is None:  # a new session (see `_serve_opening_request`) or an unknown one
            protocol = self._takes_on(scope, session)
            if session is not None and protocol is not None:
                await self._take_on(session, protocol, scope, receive, send)
            else:
                await super()._handle_stateful_request(scope, receive, send)
            return
        activity.last_used = time.monotonic()
        if scope.get("method") == "GET":  # a standing notification stream: not work in flight
            await super()._handle_stateful_request(scope, receive, send)
            return
        activity.in_flight += 1
        try:
            await super()._handle_stateful_request(scope, receive, send)
        finally:
            activity.in_flight -= 1
            activity.last_used = time.monotonic()

    async def _serve_opening_request(
        self, http_transport: StreamableHTTPServerTransport, scope: Scope, receive: Receive, send: Send
    ) -> None:
        try:
            await super()._serve_opening_request(http_transport, scope, receive, send)
        finally:
            activity = self._activity.get(http_transport.mcp_session_id or "")
            if activity is not None:
                activity.in_flight -= 1
                activity.last_used = time.monotonic()

    def _takes_on(self, scope: Scope, session: str | None) -> str | None:
        """The protocol to take on `session` (another replica's) with, or None to leave it to the SDK."""
        if session is None or not self._taking_on or session in self._server_instances:
            return None
        return adoptable_protocol(scope, session, self._ended)

    async def _take_on(self, session: str, protocol: str, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a request of a session another replica opened, on one taken on under its id."""
        user = scope.get("user")
        requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
        async with self._session_creation_lock:
            admitted = session not in self._server_instances and self._make_room(_caller(requestor))
            if admitted:
                transport = StreamableHTTPServerTransport(
                    mcp_session_id=session,
                    is_json_response_enabled=self.json_response,
                    event_store=self.event_store,
                    security_settings=self.security_settings,
                    retry_interval=self.retry_interval,
                    idle_timeout=self.session_idle_timeout,
                )
                # Connected before it is registered: the session's other requests find it ready.
                await start_taken_on(
                    transport,
                    protocol,
                    server=self.app,
                    lifespan_state=self._lifespan_state,
                    task_group=self._task_group,
                    discard=lambda: self._discard_session(session, transport),
                )
                self._server_instances[session] = transport
                if requestor is not None:
                    self._session_owners[session] = requestor
                self._admitted(session, _caller(requestor))
        if not admitted:
            if session in self._activity:  # a concurrent request of the session took it on
                await self._handle_stateful_request(scope, receive, send)
            else:  # no room: answered as the SDK answers a session it does not have
                await super()._handle_stateful_request(scope, receive, send)
            return
        log.info(
            "took on MCP session %s… opened by another replica of the agent", session[:8],
            extra={"agent": self._agent},
        )  # fmt: skip
        try:
            await answer_taking_on(
                transport,
                abandon=lambda: self._abandon(session, transport),
                scope=scope,
                receive=receive,
                send=send,
            )
        finally:
            activity = self._activity.get(session)
            if activity is not None:
                activity.in_flight -= 1
                activity.last_used = time.monotonic()

    async def _abandon(self, session: str, transport: StreamableHTTPServerTransport) -> None:
        """Discard a session whose taking on failed (its request refused): its id stays free."""
        self._forget(session, ended=False)
        await super()._discard_session(session, transport)

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        self._forget(session_id)
        await super()._discard_session(session_id, transport)

    async def close_all(self, quiet: float, patience: float) -> int:
        """Close every session once it is quiet (the end of a drain); how many were closed.

        A session is closed once no request of it has been in flight for `quiet` seconds: an
        answer is written whole first, and a client's request right after it (the MCP SDK lists
        the tools after a session's first call, to check its result) still finds the session.
        At most `patience` seconds are spent. The closed sessions' standing notification streams
        end, so the server stops without waiting for them; their IDs answer 404 from now on, and
        their clients start new sessions elsewhere.
        """
        self._taking_on = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + patience
        closed = 0
        while self._activity:
            now = time.monotonic()
            quiet_ones = [
                session
                for session, activity in self._activity.items()
                if not activity.in_flight and now - activity.last_used >= quiet
            ]
            for session in quiet_ones:
                transport = self._server_instances.get(session)
                if transport is not None:
                    await self._discard_session(session, transport)
                else:
                    self._forget(session)
            closed += len(quiet_ones)
            if not self._activity or loop.time() >= deadline:
                break
            await asyncio.sleep(min(quiet / 4, max(deadline - loop.time(), 0)))
        if closed:
            log.info("closed %d MCP session(s)", closed, extra={"agent": self._agent})
        return closed


def _caller(requestor: AuthorizationContext | None) -> Caller | None:
    if requestor is None:
        return None
    return (requestor["client_id"], requestor["issuer"], requestor["subject"])


def _mcp_endpoint(app: Starlette, path: str) -> StreamableHTTPASGIApp:
    for route in app.routes:
        if isinstance(route, Route) and route.path == path:
            endpoint = getattr(route.endpoint, "app", route.endpoint)  # behind RequireAuthMiddleware
            if isinstance(endpoint, StreamableHTTPASGIApp):
                return endpoint
    raise RuntimeError(f"no fastmcp Streamable HTTP endpoint at {path} (a fastmcp change?)")


def serve_sessions(
    app: Starlette,
    server: FastMCP,
    limits: SessionLimits,
    path: str = "/mcp",
    serving: Callable[[SessionTable | None], None] | None = None,
    holds_nothing: Callable[[str], bool] | None = None,
) -> None:
    """Make `app` (from `server.http_app(path=...)`) keep its sessions in a `SessionTable`.

    The lifespan given to the app is fastmcp 4.1.2's own (`create_streamable_http_app`) with
    the manager's class swapped: stateful, SSE responses, no event store, and fastmcp's Host and
    Origin guard in front instead of the SDK's own check. `serving` is told the table while the
    app serves (and None after).
    """
    endpoint = _mcp_endpoint(app, path)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        table = SessionTable(
            limits,
            server.name,
            holds_nothing,
            app=server._mcp_server,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        endpoint.session_manager = table
        async with table.run():
            if serving is not None:
                serving(table)
            try:
                yield
            finally:
                if serving is not None:
                    serving(None)
                # As fastmcp does: end open streams before the task group is cancelled, so
                # uvicorn does not log responses cut off mid-flight (PrefectHQ/fastmcp#3025).
                for transport in list(table._server_instances.values()):
                    with contextlib.suppress(Exception):
                        await transport.terminate()

    app.router.lifespan_context = lifespan
