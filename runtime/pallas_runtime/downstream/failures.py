"""Why a downstream request failed, in a few words and as a decision (pure; no I/O).

The SDK reports failures as exception groups, JSON-RPC errors it synthesised from HTTP statuses,
and httpx2 errors wrapping OS errors. `describe_failure` boils them down to a short reason
(`connection refused`, `HTTP 401`) without stack traces and without header values; `classify`
says whether the session that saw the failure is still worth using.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

import anyio
import httpx2
import mcp_types
from mcp import MCPError

from pallas_api.errors import DRAINING_RPC_CODE
from pallas_io.probe import describe_transport_failure, leaf_exceptions
from pallas_runtime.edge.draining import refusal_pause

Failure = Literal["transport", "session_gone", "protocol", "other"]
TRACE = logging.getLogger("pallas.forward.trace")
"""Full tracebacks of downstream failures, at DEBUG (the seed's `grep pallas.forward.trace`): the
agent and the model only ever see the short reason `describe_failure` gives."""

# The SDK's stand-in errors for HTTP failures; the status itself is kept by HttpErrorRecorder.
_HTTP_FALLBACK_MESSAGES = frozenset({"Server returned an error response", "Not Found"})
_SESSION_GONE_MESSAGE = "Session terminated"


class SourceClosedError(Exception):
    """The source was closed; it makes no new connections."""


class CallNotProcessed(Exception):
    """The server answered a call with an error result saying none of it ran (`"processed": false`).

    A stopping Pallas agent answers so a call that reaches it after its drain (over a session it
    still had): the call may go again, on a new session, which reaches a replica that serves.
    """

    def __init__(self, result: mcp_types.CallToolResult) -> None:
        super().__init__("the call was refused before any of it ran")
        self.result = result


class HttpErrorRecorder:
    """Remembers the HTTP errors one session's client saw (an httpx2 response hook).

    The SDK turns an HTTP error on a POST into a JSON-RPC error and drops the status; this keeps
    it, so a failure can say `HTTP 401` rather than `server returned an error`, and so a 404 to a
    request carrying our session id (the spec's "this session is gone", however the server words
    its error body) can be told apart from other errors.
    """

    def __init__(self) -> None:
        self.last_status: int | None = None
        self.session_gone = False

    async def __call__(self, response: httpx2.Response) -> None:
        """Record a failed response (an httpx2 response hook)."""
        if response.status_code >= 400:
            self.last_status = response.status_code
            if response.status_code == 404 and "mcp-session-id" in response.request.headers:
                self.session_gone = True


def _root(exc: BaseException) -> BaseException:
    """The first leaf that is not a cancellation (task groups collect those alongside the cause)."""
    leaves = list(leaf_exceptions(exc))
    return next((e for e in leaves if not isinstance(e, asyncio.CancelledError)), leaves[0])


def _session_gone(error: MCPError, recorder: HttpErrorRecorder | None) -> bool:
    return error.error.message == _SESSION_GONE_MESSAGE or (recorder is not None and recorder.session_gone)


def classify(exc: BaseException, recorder: HttpErrorRecorder | None = None) -> Failure:
    """What a failure means for the session: `transport` and `session_gone` ones end it."""
    root = _root(exc)
    if isinstance(root, CallNotProcessed):
        return "session_gone"  # its session is on a replica that is stopping
    if isinstance(root, MCPError):
        if _session_gone(root, recorder):
            return "session_gone"
        if root.error.code == mcp_types.CONNECTION_CLOSED or root.error.message in _HTTP_FALLBACK_MESSAGES:
            return "transport"
        return "protocol"
    if isinstance(root, httpx2.HTTPError | OSError | anyio.BrokenResourceError | anyio.ClosedResourceError):
        return "transport"
    return "other"


MAX_RETRY_PAUSE = 1.0
"""The longest a request waits, between attempts, for a server that asked it to come back later."""


def retry_pause(exc: BaseException, recorder: HttpErrorRecorder | None = None) -> float | None:
    """Seconds to wait before sending a failed request again on a new session, or None when it may not be.

    Only failures that prove the server never ran the request qualify, so that nothing runs twice:

    - the session is gone (404 to our session id): a replica that never had the session answered,
      after the one that had it stopped or the Service sent the request to another pod;
    - a draining agent refused to open the session (503, `AGENT_SHUTTING_DOWN`, see
      `pallas_runtime.edge.draining`): it closed that connection, so the next attempt reaches a ready
      replica; the pause it asks for is honoured, up to `MAX_RETRY_PAUSE`;
    - a stopping agent answered the call with an error result marked `"processed": false`
      (`CallNotProcessed`).

    A dropped connection or a timeout may come after the request ran, and is not retried.
    """
    root = _root(exc)
    if isinstance(root, CallNotProcessed):
        return 0.0
    if not isinstance(root, MCPError):
        return None
    if _session_gone(root, recorder):
        return 0.0
    asked = refusal_pause(root.error)
    return None if asked is None else min(asked, MAX_RETRY_PAUSE)


_OVERSIZED_EVENT = "Server-sent event exceeded"


def oversized(exc: BaseException) -> bool:
    """Whether a request failed because its answer was larger than the transport would read."""
    root = _root(exc)
    return isinstance(root, MCPError) and _OVERSIZED_EVENT in root.error.message


def describe_failure(exc: BaseException, recorder: HttpErrorRecorder | None = None) -> str:
    """A short reason for a failed connection or request: no stack trace, no header values."""
    root = _root(exc)
    if isinstance(root, SourceClosedError):
        return "the source is closed"
    if isinstance(root, CallNotProcessed):
        return "the agent is stopping and did not process the call"
    transport = describe_transport_failure(root)
    if transport is not None:
        return transport
    if isinstance(root, MCPError):
        status = recorder.last_status if recorder is not None else None
        if _session_gone(root, recorder):
            return "session ended by the server"
        if root.error.message in _HTTP_FALLBACK_MESSAGES:
            return f"HTTP {status}" if status else "server returned an HTTP error"
        if root.error.code == mcp_types.CONNECTION_CLOSED:
            return "connection closed"
        if root.error.code == mcp_types.REQUEST_TIMEOUT:
            return "request timed out"
        if root.error.code == DRAINING_RPC_CODE:
            return "the server is shutting down and takes no new sessions"
        return f"MCP error {root.error.code}: {root.error.message[:200]}"
    if isinstance(root, anyio.BrokenResourceError | anyio.ClosedResourceError):
        return f"transport error ({type(root).__name__})"
    # Unknown exception text may quote anything (a header, a payload); name only the type.
    return f"unexpected {type(root).__name__}"


def trace_failure(source: str, what: str, exc: BaseException | None = None) -> None:
    """Keep a downstream failure, with its traceback when there is one, on `pallas.forward.trace`."""
    TRACE.debug("%s: %s failed", source, what, exc_info=exc, extra={"server": source})
