"""`pallas chat`'s MCP session with an agent, opened again by itself when the agent loses it.

An MCP session lives in the agent process that opened it. When that process goes (a rollout, a
restart, a scale-down, a pod deleted), the session goes with it: a replacement answers the
session's id with 404 (the MCP transport's rule: start a new session), a draining agent refuses
new sessions with 503 and `Retry-After`, and a process that died drops its connections.
`AgentLink` tells these apart and opens a new session with bounded retries and backoff. Whether
the request in progress is sent again is `ChatSession`'s rule (`session.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import httpx2
from fastmcp import Client
from fastmcp.client.elicitation import ElicitationHandler
from fastmcp.client.transports import StreamableHttpTransport
from mcp import MCPError
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CONNECTION_CLOSED

from pallas_io.backoff import backoff
from pallas_runtime.edge.draining import refusal_pause

RETRY_DELAYS = tuple(backoff(attempt, first=0.5, cap=8.0) for attempt in range(6))
"""Waits between attempts to open a new session (0.5, 1, 2, 4, 8 and 8 s: about 24 s in all):
long enough for a local agent to start again or a replacement pod to become ready, short enough
that a person waits."""
SESSION_HEADER = "mcp-session-id"
TRANSPORT_ERRORS = (RuntimeError, httpx2.HTTPError, OSError)
"""What fastmcp and httpx2 raise when a connection cannot be made or breaks."""


class LinkError(Exception):
    """No session could be opened; the text says why (for one line to the user)."""


def reason(exc: BaseException) -> str:
    """The most telling text of a transport failure (fastmcp wraps the httpx2 error)."""
    cause = exc.__cause__ or exc
    return str(cause) or type(cause).__name__


class AgentLink:
    """One MCP session with the agent at `url`, reopened on request after it was lost."""

    def __init__(
        self, url: str, headers: Mapping[str, str], wait: float, elicitation: ElicitationHandler | None = None
    ) -> None:
        self.url = url
        self._elicitation = elicitation
        self._headers = dict(headers)
        self._wait = wait
        self._client: Client[Any] | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self.session_lost = False
        """The agent answered our session's id with 404: it no longer knows the session, so
        the request that got the 404 never ran."""

    @property
    def headers(self) -> dict[str, str]:
        """The headers every request carries (the bearer token, `--header`s)."""
        return dict(self._headers)

    @property
    def elicitation(self) -> ElicitationHandler | None:
        """What answers the agent's questions (the terminal's approver)."""
        return self._elicitation

    @property
    def client(self) -> Client[Any]:
        """The connected client.

        Raises:
            RuntimeError: not connected.
        """
        if self._client is None:
            raise RuntimeError("not connected to the agent")
        return self._client

    def lost(self, exc: BaseException) -> bool:
        """Whether `exc` means the session or its connection is gone (a reconnect may help)."""
        if isinstance(exc, MCPError):
            return self.session_lost or exc.error.code == CONNECTION_CLOSED
        return isinstance(exc, TRANSPORT_ERRORS)

    def _http_client(
        self,
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
        **_: Any,  # fastmcp adds follow_redirects, which the MCP SDK's client sets anyway
    ) -> httpx2.AsyncClient:
        client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
        client.event_hooks.setdefault("response", []).append(self._watch)
        return client

    async def _watch(self, response: httpx2.Response) -> None:
        if response.status_code == 404 and SESSION_HEADER in response.request.headers:
            self.session_lost = True

    async def connect(self) -> None:
        """Open a session (one attempt).

        Raises:
            MCPError: the agent refused it (a JSON-RPC error, e.g. 503 while draining).
            RuntimeError, httpx2.HTTPError, OSError: it could not be reached.
        """
        transport = StreamableHttpTransport(
            self.url, headers=self._headers, httpx_client_factory=self._http_client
        )
        client: Client[Any] = Client(
            transport,
            mode="legacy",
            timeout=self._wait,
            init_timeout=min(self._wait, 30),
            elicitation_handler=self._elicitation,
        )
        stack = contextlib.AsyncExitStack()
        self.session_lost = False
        await stack.enter_async_context(client)
        self._client, self._stack = client, stack

    async def close(self) -> None:
        """End the session (an HTTP DELETE); a failure there, the agent being gone, is ignored."""
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    async def reconnect(self) -> None:
        """Open a new session after the last one was lost, retrying with backoff.

        Raises:
            LinkError: no session within the retries (the last failure named).
        """
        await self.close()
        last, asked = "", 0.0
        for delay in (0.0, *RETRY_DELAYS):
            await asyncio.sleep(max(delay, asked))
            try:
                await self.connect()
                return
            except MCPError as exc:
                wait = refusal_pause(exc.error)  # a draining agent's asked-for wait
                if wait is None:
                    raise LinkError(f"{self.url} refused a new session: {exc.error.message}") from None
                last, asked = exc.error.message, wait
            except TRANSPORT_ERRORS as exc:
                last, asked = reason(exc), 0.0
        raise LinkError(
            f"lost the session with {self.url} and could not open a new one within "
            f"{sum(RETRY_DELAYS):g}s: {last}"
        )
