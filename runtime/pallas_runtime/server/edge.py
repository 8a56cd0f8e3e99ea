"""The agent's HTTP app: MCP at `/mcp`, A2A at `/a2a`, the probe routes, behind the guards of its edge."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.types import ASGIApp

from pallas_io.tracing import continue_inbound
from pallas_runtime.edge.credential import SingleCredential
from pallas_runtime.edge.draining import DrainGuard
from pallas_runtime.edge.request_ids import OneRequestPerId
from pallas_runtime.edge.request_limit import MAX_REQUEST_BYTES, RequestLimit
from pallas_runtime.edge.sessions import serve_sessions
from pallas_runtime.server.agent_server import AgentServer


def agent_app(server: AgentServer, allowed_hosts: Sequence[str] = ()) -> ASGIApp:
    """The agent's HTTP app: MCP at /mcp plus the probe and metrics routes.

    Requests over the MCP SDK's body limit are refused with a JSON-RPC error naming the limit,
    requests with more than one `Authorization` header with 400 `invalid_request`, before
    authentication (`SingleCredential`: the agent verifies one credential and forwards it), and a
    request reusing the id of one still in flight on its session with 409 (`OneRequestPerId`).
    MCP sessions are kept by a `SessionTable` within the agent's `spec.sessions`. While the agent
    drains (`AgentServer.drain`), a request that would open a session is refused with 503 and a
    retryable error, and every answer closes its connection (`DrainGuard`). Each refusal counts
    in `pallas_requests_refused_total` under its reason (`AgentServer.refused`).

    DNS-rebinding protection is explicit: fastmcp 4.1.2's setting defaults to off. In "auto"
    mode it checks Host and Origin for servers bound to loopback (all of `pallas run`); listed
    hosts turn the check on for any bind address (e.g. the Service DNS names of a pod), and the
    server's own address is always accepted, so probes and scrapes by pod IP still work.
    """
    app = server.mcp.http_app(
        path="/mcp", host_origin_protection="auto", allowed_hosts=list(allowed_hosts) or None
    )
    if server.a2a is not None:  # beside /mcp, under the same middleware (authentication included)
        app.router.routes.extend(server.a2a.routes())
    serve_sessions(app, server.mcp, server.sessions, serving=server.keep_session_table)
    refused = server.refused
    one_per_id = OneRequestPerId(app, MAX_REQUEST_BYTES, lambda: refused("duplicate_id"))
    one_credential = SingleCredential(one_per_id, lambda: refused("credentials"))
    limited = RequestLimit(one_credential, MAX_REQUEST_BYTES, lambda: refused("too_large"))
    guarded = DrainGuard(limited, server.config.name, lambda: server.draining, lambda: refused("draining"))
    traced: ASGIApp = continue_inbound(guarded)
    return traced
