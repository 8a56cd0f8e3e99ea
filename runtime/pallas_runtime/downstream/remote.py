"""The ToolSource behaviour common to downstream MCP servers and peer agents.

Sessions and credentials:

- Calls that carry no forwarded bearer share one long-lived session (`SharedSession`) whose HTTP
  headers are the configured ones and nothing else.
- A call that forwards the caller's bearer gets a session of its own, opened with that bearer and
  closed when the call ends. A stateful downstream session is therefore never shared between
  users, and the bearer lives only in that call's HTTP client: it is never cached, never set on
  shared state, never read from a contextvar (the fast-agent incident: a bearer cached on a
  persistent connection reached the next user).
- A server marked `stateful` keeps one session per caller conversation instead
  (`ConversationSessions`): whatever state the server keeps per session belongs to one
  conversation of one caller. A call outside any conversation (a gateway client's call without
  an MCP session) gets a session of its own, closed with the call.
- An explicitly configured `Authorization` header always wins over forwarding.
- A source that forwards the caller's bearer and refuses the shared session with 401 (an agent
  checking callers) is listed with the caller's bearer, on a session of the call's own; the
  list is the same for every caller (tool schemas are not per user), so it is cached as usual,
  and each call is still authorised by the source with its own caller's bearer.

The tool list is cached. After `notifications/tools/list_changed`, a failed call or a lost
connection it is fetched again in the background while turns go on with the list they had: a
hanging server must not add its timeout to every message. Only a source never listed yet is
waited for (once); a source that failed to list is left out of turns at once, with its last
failure, while one background attempt at a time tries again. A background listing that needs
the caller's bearer holds it only until that listing ends (at most the source's timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp
import anyio
import mcp_types
from mcp import ClientSession
from mcp.client.session import ElicitationFnT, IncomingMessage

from pallas_api.errors import error_code_of, unprocessed
from pallas_api.fields import DEFAULT_MAX_RESULT_BYTES, ServerSessionLimits
from pallas_io import probe as mcp_probe
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.downstream.call_path import CallRefused
from pallas_runtime.downstream.connection import (
    BearerSlot,
    SharedSession,
    Transport,
    open_session,
    tls_context,
)
from pallas_runtime.downstream.content import parts_from_result
from pallas_runtime.downstream.conversation_sessions import ConversationSessions
from pallas_runtime.downstream.failures import (
    CallNotProcessed,
    HttpErrorRecorder,
    classify,
    describe_failure,
    oversized,
    retry_pause,
    trace_failure,
)
from pallas_runtime.downstream.inbound_auth import BearerForwarding
from pallas_runtime.downstream.source import (
    DownstreamError,
    DownstreamTimeout,
    Onward,
    ProbeResult,
    ProgressHandler,
    RemoteTool,
    ToolOutcome,
)
from pallas_runtime.http_transport import AiohttpTransport, connection_pool
from pallas_runtime.messages import TextPart
from pallas_runtime.sizes import MiB, human_bytes, utf8_size

log = logging.getLogger("pallas.downstream")
T = TypeVar("T")

SESSION_ATTEMPTS = 5
"""Sessions a request may be tried on while the server proves it never ran it: one that had gone,
then a few refused by a draining replica still reached over kept-alive connections, or met by an
endpoint update still spreading (a few seconds at most, on a busy node)."""

LEAST_RETRY_PAUSES = (0.0, 0.25, 0.5, 1.0)
"""The least wait before the 2nd, 3rd, 4th and 5th attempt. The first retry goes at once (a new
connection usually reaches the replica that now serves); when that session is gone too, the
Service's endpoints are still moving (a rollout), and trying again at once would meet the same
moment of it. A table, not `pallas_io.backoff`: each step is only a floor under the pause the
server asks for, and the first retry goes at once."""

NEEDS_CALLER_CREDENTIALS = "needs caller credentials"
"""The note of a source that refuses a probe without a bearer and is called with the caller's."""


def _destructive(tool: mcp_types.Tool) -> bool:
    """The tool says it may destroy (`destructiveHint: true`, not read-only); unannotated is not."""
    hints = tool.annotations
    return hints is not None and hints.destructive_hint is True and hints.read_only_hint is not True


class _ProgressRelay:
    """Passes progress on to the caller's handler until the call is over; never fails the call."""

    def __init__(self, label: str, handler: ProgressHandler) -> None:
        self._label = label
        self._handler = handler
        self._open = True

    def close(self) -> None:
        self._open = False

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if not self._open:
            return
        try:
            await self._handler(progress, total, message)
        except Exception as exc:  # noqa: BLE001 - a failure here must not end the caller
            log.warning("%s: progress handler failed (%s)", self._label, type(exc).__name__)


class _Failure(Exception):
    """A failed request together with the HTTP evidence of the session it ran on."""

    def __init__(self, cause: Exception, recorder: HttpErrorRecorder) -> None:
        super().__init__(type(cause).__name__)
        self.cause = cause
        self.recorder = recorder
        self.kind = classify(cause, recorder)

    def reason(self) -> str:
        return describe_failure(self.cause, self.recorder)


class RemoteMcpSource:
    """A ToolSource backed by an MCP endpoint reached over Streamable HTTP or SSE."""

    _elicitation: ElicitationFnT | None = None
    """What answers the endpoint's elicitations (a peer's approvals); None declares no support."""

    def __init__(
        self,
        *,
        name: str,
        url: str,
        transport: Transport,
        timeout: float,
        probe_timeout: float,
        headers: Mapping[str, str],
        forward_inbound_auth: bool,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        stateful: ServerSessionLimits | None = None,
    ) -> None:
        """Build the source; nothing connects until first use.

        `stateful` (the server's `sessions` limits) gives each caller conversation a session of
        its own; None shares one session among calls without a forwarded bearer.
        """
        self._name = name
        self._max_result_bytes = max_result_bytes
        # What one SSE event may hold: the result, JSON-escaped, and (fastmcp servers) sent twice,
        # as content and as structuredContent.
        self._max_event_bytes = 4 * max_result_bytes + MiB
        self._url = url
        self._transport: Transport = transport
        self._timeout = timeout
        self._probe_timeout = probe_timeout
        self._auth = BearerForwarding.of(headers, forward_inbound_auth=forward_inbound_auth)
        self._headers = self._auth.configured
        self._shared = SharedSession(name, self._open_kept, on_lost=self._tools_changed, server=name)
        self._conversations = (
            ConversationSessions(
                name,
                stateful,
                lambda bearer, recorder: self._open_kept(recorder, bearer),
                on_lost=self._tools_changed,
            )
            if stateful is not None
            else None
        )
        # One pool of keep-alive connections for the shared session and every call's own session:
        # a call that forwards a bearer opens a session, not a TCP (and TLS) connection.
        self._pool: aiohttp.ClientSession | None = None
        self._tools: list[RemoteTool] | None = None
        self._generation = 0
        self._cached_generation = -1
        self._listing: asyncio.Task[str | None] | None = None
        self._list_failure: str | None = None
        self._listing_needs_bearer = False

    @property
    def name(self) -> str:
        """The server's or agent's name."""
        return self._name

    @property
    def forwards_inbound_auth(self) -> bool:
        """Whether a caller's `Authorization` is sent on (forwarding on, no explicit header)."""
        return self._auth.forwards

    def _keep(self, tool: mcp_types.Tool) -> bool:
        """Which of the endpoint's tools this source offers; subclasses narrow it."""
        return True

    def _connections(self) -> aiohttp.ClientSession | None:
        """The source's connection pool (Streamable HTTP only: the SSE transport keeps its own)."""
        if self._transport != "streamable-http":
            return None
        if self._pool is None or self._pool.closed:
            self._pool = connection_pool(tls_context())
        return self._pool

    @contextlib.asynccontextmanager
    async def _open_kept(
        self, recorder: HttpErrorRecorder, bearer: BearerSlot | None = None
    ) -> AsyncIterator[ClientSession]:
        """A session kept for many calls: the shared one, or a conversation's (with its bearer slot)."""
        async with open_session(
            self._url,
            self._transport,
            self._headers,
            on_message=self._on_message,
            recorder=recorder,
            max_event_bytes=self._max_event_bytes,
            pool=self._connections(),
            auth=bearer,
            elicitation=self._elicitation,
        ) as session:
            yield session

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            log.info("%s: tool list changed; fetching it again", self._name)
            self._tools_changed()
            if not self._listing_needs_bearer:
                self._start_listing(None)
        elif isinstance(message, Exception):
            log.debug("%s: transport reported %s", self._name, describe_failure(message))

    def _tools_changed(self) -> None:
        self._generation += 1

    async def _with_shared(self, op: Callable[[ClientSession], Awaitable[T]]) -> T:
        return await self._with_kept(self._shared, op)

    async def _with_kept(self, kept: SharedSession, op: Callable[[ClientSession], Awaitable[T]]) -> T:
        """Run `op` on a kept session; on a new one when the server never ran it (`_retried`).

        Raises:
            _Failure: Connecting or the request failed.
        """

        async def attempt() -> T:
            try:
                session = await kept.get()
            except Exception as exc:
                raise _Failure(exc, kept.connect_recorder) from exc
            try:
                return await op(session)
            except Exception as exc:
                failure = _Failure(exc, kept.recorder_of(session))
                if failure.kind in ("transport", "session_gone"):
                    kept.discard(session)
                raise failure from exc

        return await self._retried(attempt)

    async def _retried(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run `attempt` again, on a new session, while its failure proves the server never ran it.

        A rollout or a drain moves an agent's sessions: the replica that had ours stops and
        another answers 404 for it, or a draining one refuses to open a session (`retry_pause`).
        Each attempt opens a new session (a 404 session is discarded, a refused one never
        opened), at most `SESSION_ATTEMPTS` times, within the caller's timeout.

        Raises:
            _Failure: The last attempt's failure, or the first one that may have run.
        """
        for number in range(1, SESSION_ATTEMPTS + 1):
            try:
                return await attempt()
            except _Failure as failure:
                pause = retry_pause(failure.cause, failure.recorder)
                if pause is None or number == SESSION_ATTEMPTS:
                    raise
                log.info("%s: %s; trying again on a new session", self._name, failure.reason())
                # The first retry goes at once: the refusing connection is closed, and a new one
                # reaches a ready replica. A later one waits as long as the server asked, and at
                # least a moment longer each time.
                pause = 0.0 if number == 1 else max(pause, LEAST_RETRY_PAUSES[number - 1])
                if pause > 0:
                    await asyncio.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    async def list_tools(self, *, inbound_auth: str | None = None) -> list[RemoteTool]:
        """The endpoint's tools from the cache; a stale cache is refreshed in the background.

        `inbound_auth` lists an endpoint that wants the caller's bearer (see the module notes).

        Raises:
            DownstreamError: The endpoint has never been listed and cannot be now (the first
                listing is waited for), or its last listing failed (reported at once).
        """
        if self._tools is not None and self._cached_generation == self._generation:
            return list(self._tools)
        bearer = self._auth.bearer(inbound_auth)
        listing = self._start_listing(bearer)
        if self._tools is None and self._list_failure is None:
            failure = await asyncio.shield(listing)  # nothing to go on yet: wait for the answer
            if self._tools is None:
                raise DownstreamError(failure or f"{self._name}: listing tools failed")
        if self._tools is not None:
            return list(self._tools)
        raise DownstreamError(self._list_failure or f"{self._name}: listing tools failed")

    def _start_listing(self, bearer: str | None) -> asyncio.Task[str | None]:
        """The listing in flight, or a new one: at most one per source at a time."""
        if self._listing is None or self._listing.done():
            self._listing = asyncio.create_task(self._refresh_tools(bearer), name=f"list-tools-{self._name}")
        return self._listing

    async def _refresh_tools(self, bearer: str | None) -> str | None:
        """List the endpoint within the timeout; the failure is returned, never raised.

        A failure of the source (unreachable, hanging, broken) is kept and reported to later
        turns at once. A refusal of the caller's own bearer (401/403) is that caller's alone:
        it is returned to them but never held against the next caller.
        """
        generation = self._generation
        listed: list[mcp_types.Tool] | None = None
        try:
            with anyio.move_on_after(self._timeout):
                listed = await self._list(bearer)
        except _Failure as failure:
            trace_failure(self._name, "listing tools", failure.cause)
            text = f"{self._name}: listing tools failed: {failure.reason()}"
            if bearer is None or failure.recorder.last_status not in (401, 403):
                self._list_failure = text
            return text
        except Exception as exc:  # noqa: BLE001 - kept for the turns that ask, never lost in a task
            trace_failure(self._name, "listing tools", exc)
            self._list_failure = f"{self._name}: listing tools failed: {type(exc).__name__}"
            return self._list_failure
        if listed is None:
            trace_failure(self._name, f"listing tools (timed out after {self._timeout:g}s)")
            self._list_failure = f"{self._name}: listing tools timed out after {self._timeout:g}s"
            return self._list_failure
        self._tools = [self._remote_tool(t) for t in listed if self._keep(t)]
        self._cached_generation = generation
        self._list_failure = None
        return None

    async def _list(self, bearer: str | None) -> list[mcp_types.Tool]:
        if bearer is None or not self._listing_needs_bearer:
            try:
                return await self._with_shared(self._list_all)
            except _Failure as failure:
                if bearer is None or failure.recorder.last_status != 401:
                    raise
                self._listing_needs_bearer = True
        return await self._with_bearer(bearer, self._list_all)

    @staticmethod
    async def _list_all(session: ClientSession) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        params: mcp_types.PaginatedRequestParams | None = None
        while True:
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            if not page.next_cursor:
                return tools
            params = mcp_types.PaginatedRequestParams(cursor=page.next_cursor)

    def _remote_tool(self, tool: mcp_types.Tool) -> RemoteTool:
        return RemoteTool(
            source=self._name,
            name=tool.name,
            description=tool.description or tool.title or "",
            input_schema=dict(tool.input_schema),
            destructive=_destructive(tool),
        )

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        onward: Onward,
    ) -> ToolOutcome:
        """Call one tool within the configured timeout.

        `onward.credential` is sent only when this source forwards inbound auth; such a call runs on a
        session of its own. A tool error (`isError`) or a JSON-RPC error answer is an outcome with
        `is_error=True`, not an exception; so is a call `_outgoing` refuses, unsent.

        Raises:
            DownstreamError: Timeout, transport failure or an unusable answer.
        """
        try:
            arguments, meta = self._outgoing(arguments, onward)
        except CallRefused as exc:
            return ToolOutcome((TextPart(str(exc)),), is_error=True, code=exc.code)
        bearer = self._auth.bearer(onward.credential)
        on_progress = onward.on_progress
        relay = _ProgressRelay(f"{self._name}: {tool}", on_progress) if on_progress is not None else None
        result: mcp_types.CallToolResult | None = None
        try:
            with anyio.move_on_after(self._timeout):
                result = await self._on_its_session(
                    bearer, onward.conversation, lambda s: self._call(s, tool, arguments, relay, meta)
                )
        except _Failure as failure:
            if isinstance(failure.cause, CallNotProcessed):
                result = failure.cause.result  # refused on every attempt: the caller gets the refusal
            else:
                return self._failed_call(tool, failure)
        finally:
            if relay is not None:
                relay.close()
        if result is None:
            self._tools_changed()
            trace_failure(self._name, f"calling {tool} (timed out after {self._timeout:g}s)")
            raise DownstreamTimeout(f"{self._name}: {tool} timed out after {self._timeout:g}s")
        parts = parts_from_result(result)
        size = sum(utf8_size(p.text) if isinstance(p, TextPart) else len(p.data) for p in parts)
        if size > self._max_result_bytes:
            text = (
                f"{self._name}: the result of {tool} is {human_bytes(size)}; "
                f"the limit is {human_bytes(self._max_result_bytes)} (maxResultBytes)"
            )
            return ToolOutcome(content=(TextPart(text),), is_error=True)
        await self._answered(result, onward)
        code = error_code_of(result.structured_content) if result.is_error else None
        blocks = tuple(result.content) if len(result.content) == len(parts) else None
        return ToolOutcome(parts, result.is_error, code, blocks=blocks, structured=result.structured_content)

    def _failed_call(self, tool: str, failure: _Failure) -> ToolOutcome:
        """The outcome of a call that got no answer: an error outcome, else DownstreamError raised."""
        self._tools_changed()
        trace_failure(self._name, f"calling {tool}", failure.cause)
        if oversized(failure.cause):
            raise DownstreamError(
                f"{self._name}: the result of {tool} is larger than "
                f"{human_bytes(self._max_event_bytes)}; the limit is "
                f"{human_bytes(self._max_result_bytes)} (maxResultBytes)"
            ) from None
        if failure.kind == "protocol":
            text = f"{self._name}: {tool} failed: {failure.reason()}"
            return ToolOutcome(content=(TextPart(text),), is_error=True)
        raise DownstreamError(f"{self._name}: calling {tool} failed: {failure.reason()}") from None

    async def _answered(self, result: mcp_types.CallToolResult, onward: Onward) -> None:
        """What a source learns from a result besides its content (a peer: what it spent)."""

    def _outgoing(
        self, arguments: dict[str, Any], onward: Onward
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The arguments and `_meta` a tools/call sends (CallRefused: the call is not to be sent).

        A downstream server takes the model's arguments as they are and no part in agent paths.
        """
        return arguments, None

    @staticmethod
    async def _call(
        session: ClientSession,
        tool: str,
        arguments: dict[str, Any],
        relay: _ProgressRelay | None,
        meta: dict[str, Any] | None,
    ) -> mcp_types.CallToolResult:
        result = await session.call_tool(tool, arguments, progress_callback=relay, meta=meta)  # type: ignore[arg-type]
        if result.is_error and unprocessed(result.structured_content):
            raise CallNotProcessed(result)  # a stopping agent ran none of it: `_retried` sends it again
        return result

    async def _on_its_session(
        self,
        bearer: str | None,
        conversation: ConversationKey | None,
        op: Callable[[ClientSession], Awaitable[T]],
    ) -> T:
        """Run a call on the session it belongs on (see the module notes)."""
        if self._conversations is not None:
            if conversation is None:
                return await self._with_own(bearer, op)
            async with self._conversations.use(conversation, bearer) as kept:
                return await self._with_kept(kept, op)
        if bearer is None:
            return await self._with_shared(op)
        return await self._with_own(bearer, op)

    async def _with_bearer(self, bearer: str, op: Callable[[ClientSession], Awaitable[T]]) -> T:
        return await self._with_own(bearer, op)

    async def _with_own(self, bearer: str | None, op: Callable[[ClientSession], Awaitable[T]]) -> T:
        # A session (and HTTP client) of this call's own: the bearer goes nowhere else.
        headers = self._auth.headers(bearer)

        async def attempt() -> T:
            recorder = HttpErrorRecorder()
            try:
                async with open_session(
                    self._url,
                    self._transport,
                    headers,
                    on_message=self._on_message,
                    recorder=recorder,
                    max_event_bytes=self._max_event_bytes,
                    pool=self._connections(),
                    elicitation=self._elicitation,
                ) as session:
                    return await op(session)
            except Exception as exc:
                raise _Failure(exc, recorder) from exc

        return await self._retried(attempt)

    async def probe(self) -> ProbeResult:
        """MCP initialize (and DELETE of the session) within the probe timeout; never raises.

        The probe sends the configured headers. A source that forwards the caller's bearer is
        probed without one (a probe has no caller): its 401 means it serves and wants the
        caller's token, which every call carries, so it is up with the note `needs caller
        credentials` rather than down. Without forwarding (or with a configured
        `Authorization`), a 401 stays a failure: the configured credentials are missing or wrong.
        """
        pool = self._connections()
        outcome = await mcp_probe.probe(
            self._url,
            time_limit=self._probe_timeout,
            transport=self._transport,
            headers=self._headers,
            verify=tls_context(),
            # The source's keep-alive connections: no TCP connect per probe, and aiohttp's third
            # of httpcore2's CPU per request (get_health probes every source on every call).
            connections=AiohttpTransport(verify=tls_context(), pool=pool) if pool is not None else None,
        )
        if not outcome.ok and self._auth.forwards and (outcome.unauthorized or outcome.status == 401):
            return ProbeResult(source=self._name, ok=True, note=NEEDS_CALLER_CREDENTIALS)
        return ProbeResult(source=self._name, ok=outcome.ok, message=outcome.message)

    async def release(self, conversation: ConversationKey) -> None:
        """The conversation ended: close its session, if the server is stateful and it has one."""
        if self._conversations is not None:
            await self._conversations.release(conversation)

    async def aclose(self) -> None:
        """Stop a listing in flight and close the shared session and the conversations' sessions.

        Calls that forward a bearer close their own sessions.
        """
        if self._listing is not None:
            self._listing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listing
        if self._conversations is not None:
            await self._conversations.aclose()
        await self._shared.aclose()
        if self._pool is not None:
            await self._pool.close()
