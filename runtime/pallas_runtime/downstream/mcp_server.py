"""A downstream MCP server (`spec.servers[]` of an agent) as a ToolSource."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pallas_api.config import DownstreamServer, HeaderConfig
from pallas_runtime.downstream.remote import RemoteMcpSource

log = logging.getLogger("pallas.downstream")


def resolve_headers(
    source: str, headers: list[HeaderConfig], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The configured headers' values now; a header whose env var is unset is left out.

    Each left-out header is reported once, here, by header and variable name (never a value).
    """
    env = dict(environ) if environ is not None else None
    resolved: dict[str, str] = {}
    for header in headers:
        value = header.resolve(env)
        if value is None:
            log.warning(
                "%s: header %s is not sent: %s is not set",
                source,
                header.name,
                header.value_origin(),
            )
            continue
        resolved[header.name] = value
    return resolved


class McpServerSource(RemoteMcpSource):
    """Tools of one downstream MCP server, reached over Streamable HTTP or SSE.

    Configured headers are resolved once, when the source is built; a rotated value (a Secret's
    file rewritten by the kubelet) makes a new source for the next turns (`agent.live`), while
    calls in flight finish on this one. The caller's `Authorization` is sent on only when the
    server sets `forwardInboundAuth` and configures no `Authorization` header of its own. A
    `stateful` server gets a session per caller conversation (`conversation_sessions`).
    """

    def __init__(
        self, server: DownstreamServer, *, probe_timeout: float, environ: Mapping[str, str] | None = None
    ) -> None:
        """Build the source; nothing connects until the first list_tools, call_tool or probe.

        Args:
            server: The server's config.
            probe_timeout: The health probe's budget in seconds (`health.probeTimeoutSeconds`).
            environ: Where `valueFromEnv` headers are looked up; the process environment if None.
        """
        super().__init__(
            name=server.name,
            url=server.url,
            transport=server.transport,
            timeout=server.timeout_seconds,
            probe_timeout=probe_timeout,
            headers=resolve_headers(server.name, server.headers, environ),
            forward_inbound_auth=server.forward_inbound_auth,
            max_result_bytes=server.max_result_bytes,
            stateful=server.sessions if server.stateful else None,
        )
