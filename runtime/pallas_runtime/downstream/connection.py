"""MCP client sessions to one downstream endpoint, shared by McpServerSource and PeerAgentSource.

`open_session` opens one initialized session (Streamable HTTP or SSE) with a fixed set of HTTP
headers. `SharedSession` keeps one such session open for many calls and reopens it after it is
lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import ssl
import weakref
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import anyio
import httpx2
import mcp_types
from mcp import ClientSession
from mcp.client.session import ElicitationFnT, MessageHandlerFnT
from mcp.client.sse import sse_client
from mcp.client.streamable_http import DEFAULT_MAX_SSE_EVENT_SIZE, streamable_http_client

from pallas_runtime import __version__
from pallas_runtime.downstream.failures import HttpErrorRecorder, SourceClosedError, describe_failure
from pallas_runtime.http_transport import AiohttpTransport

log = logging.getLogger("pallas.downstream")

Transport = Literal["streamable-http", "sse"]

CONNECT_TIMEOUT = 10.0
CLOSE_GRACE = 2.0
"""How long closing a session may spend on its DELETE before it is abandoned."""
CLIENT_INFO = mcp_types.Implementation(name="pallas", version=__version__)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every downstream client.

    Building an httpx2 client otherwise loads the CA bundle into a new context each time
    (~28 ms of CPU), which a per-call session or a health probe cannot afford.
    """
    return httpx2.create_ssl_context()


def _http_timeout() -> httpx2.Timeout:
    # No read timeout: every request is bounded by its caller's deadline, and a shared session's
    # GET stream is meant to stay open while it idles.
    return httpx2.Timeout(CONNECT_TIMEOUT, read=None)


@contextlib.asynccontextmanager
async def open_session(
    url: str,
    transport: Transport,
    headers: Mapping[str, str],
    *,
    on_message: MessageHandlerFnT,
    recorder: HttpErrorRecorder,
    max_event_bytes: int | None = None,
    pool: aiohttp.ClientSession | None = None,
    auth: httpx2.Auth | None = None,
    elicitation: ElicitationFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized MCP session (handshake protocol) whose every HTTP request carries `headers`.

    `auth` adds what changes between requests (a conversation's latest forwarded bearer,
    `BearerSlot`). `elicitation` answers the endpoint's `elicitation/create` requests (and makes
    the session declare the capability); None declares none.

    Must be entered and exited by the same task (the SDK's transports run anyio task groups).
    On exit a Streamable HTTP session is ended with a DELETE. `max_event_bytes` bounds one SSE
    event of a Streamable HTTP session (the SDK's default is 1 MiB; the legacy SSE transport
    keeps it). A Streamable HTTP session sends over `pool`'s connections when one is given
    (see `http_transport.connection_pool`), else over connections of its own.
    """
    hooks: dict[str, list[Any]] = {"response": [recorder]}
    own_auth = auth
    async with contextlib.AsyncExitStack() as stack:
        if transport == "sse":

            def client_factory(
                headers: dict[str, str] | None = None,
                timeout: httpx2.Timeout | None = None,
                auth: httpx2.Auth | None = None,
            ) -> httpx2.AsyncClient:
                return httpx2.AsyncClient(
                    headers=headers,
                    timeout=_http_timeout(),
                    auth=auth or own_auth,
                    event_hooks=hooks,
                    verify=tls_context(),
                )

            read, write = await stack.enter_async_context(
                sse_client(url, headers=dict(headers), httpx_client_factory=client_factory)
            )
        else:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(headers),
                    timeout=_http_timeout(),
                    auth=auth,
                    event_hooks=hooks,
                    transport=AiohttpTransport(verify=tls_context(), pool=pool),
                )
            )
            limit = max_event_bytes if max_event_bytes is not None else DEFAULT_MAX_SSE_EVENT_SIZE
            read, write = await stack.enter_async_context(
                streamable_http_client(url, http_client=http, max_sse_event_size=limit)
            )
        session = await stack.enter_async_context(
            ClientSession(
                read,
                write,
                message_handler=on_message,
                client_info=CLIENT_INFO,
                elicitation_callback=elicitation,
            )
        )
        await session.initialize()
        yield session


class BearerSlot(httpx2.Auth):
    """The `Authorization` of a kept session's requests: its conversation's latest forwarded bearer.

    A session kept for one caller conversation of a stateful server outlives the call that opened
    it, and the caller's token may be renewed meanwhile. Each call of the conversation puts its
    own bearer here before it sends; the session is keyed by the caller, so a bearer only ever
    travels on its own caller's session, and it is forgotten with the session.
    """

    def __init__(self) -> None:
        self.value: str | None = None

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        """Send the request with the slot's bearer, if any."""
        if self.value is not None:
            request.headers["Authorization"] = self.value
        yield request


Opener = Callable[[HttpErrorRecorder], AbstractAsyncContextManager[ClientSession]]
"""Opens one session whose HTTP errors go to the given recorder."""


@dataclass(eq=False)
class _Holder:
    """One shared session and the task that owns it."""

    ready: asyncio.Future[ClientSession]
    recorder: HttpErrorRecorder
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    session: ClientSession | None = None
    ended: bool = False

    @property
    def usable(self) -> bool:
        return self.session is not None and not self.ended and not self.stop.is_set()


class SharedSession:
    """One session shared by many calls, opened on first use and reopened after it is lost.

    anyio task groups must be exited by the task that entered them, so the session lives in a task
    of its own rather than in whichever call happened to open it. That task starts from an empty
    contextvars context, so nothing a caller set (a request's bearer, say) can reach it; the
    session's headers are fixed when it opens and never carry a forwarded bearer (a kept
    conversation session's `BearerSlot` is its own caller's).

    `label` names it in the log: one line when it connects, one when it is lost.
    """

    def __init__(self, label: str, opener: Opener, on_lost: Callable[[], None], **log_fields: str) -> None:
        self._label = label
        self._fields = log_fields
        self._opener = opener
        self._on_lost = on_lost
        self._holder: _Holder | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.connect_recorder = HttpErrorRecorder()
        """The HTTP evidence of the latest attempt to connect."""
        self._recorders: weakref.WeakKeyDictionary[ClientSession, HttpErrorRecorder] = (
            weakref.WeakKeyDictionary()
        )

    def recorder_of(self, session: ClientSession) -> HttpErrorRecorder:
        """The HTTP evidence of one session this holder opened (a 404 is pinned on its session)."""
        return self._recorders.get(session) or HttpErrorRecorder()

    async def get(self) -> ClientSession:
        """The open session, connecting first if there is none; connection errors propagate."""
        async with self._lock:
            if self._closed:
                raise SourceClosedError(self._label)
            holder = self._holder
            if holder is not None and holder.usable and holder.session is not None:
                return holder.session
            recorder = self.connect_recorder = HttpErrorRecorder()
            holder = _Holder(ready=asyncio.get_running_loop().create_future(), recorder=recorder)
            self._holder = holder
            task = asyncio.create_task(self._own(holder), context=contextvars.Context())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            try:
                return await holder.ready
            except BaseException:
                # Connection failed or the caller gave up (its deadline): drop the attempt.
                holder.stop.set()
                if not holder.ready.done() or holder.session is None:
                    task.cancel()
                raise

    def discard(self, session: ClientSession) -> None:
        """Stop using `session` (it failed); the next `get` opens a new one."""
        holder = self._holder
        if holder is not None and holder.session is session:
            holder.stop.set()
            self._holder = None

    async def _own(self, holder: _Holder) -> None:
        try:
            with anyio.CancelScope() as scope:
                async with self._opener(holder.recorder) as session:
                    holder.session = session
                    self._recorders[session] = holder.recorder
                    log.info("%s: connected", self._label, extra=self._fields)
                    if not holder.ready.done():
                        holder.ready.set_result(session)
                    await holder.stop.wait()
                    # Bound the DELETE that closing sends: a hung server must not hold us up.
                    scope.deadline = anyio.current_time() + CLOSE_GRACE
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - a failure here must not end the caller
            if holder.session is None:
                if not holder.ready.done() and isinstance(exc, Exception):
                    holder.ready.set_exception(exc)
            elif not holder.stop.is_set():
                log.warning(
                    "%s: connection lost (%s)", self._label, describe_failure(exc), extra=self._fields
                )
            else:
                log.debug("%s: closing the session failed (%s)", self._label, describe_failure(exc))
        finally:
            lost = holder.session is not None and not holder.stop.is_set()
            holder.ended = True
            if not holder.ready.done():
                holder.ready.cancel()
            if lost:
                self._on_lost()

    async def aclose(self) -> None:
        """Close the session and wait (briefly) for its task to finish."""
        self._closed = True
        if self._holder is not None:
            self._holder.stop.set()
            self._holder = None
        tasks = set(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=CLOSE_GRACE + 1)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
