"""The one rule for sending a caller's `Authorization` on to a downstream server or peer.

A source forwards its caller's bearer when its config sets `forwardInboundAuth` and configures
no `Authorization` header of its own: an explicit header always wins. MCP servers, Pallas peers
(`remote`) and external A2A agents (`a2a_peer`) all follow it through `BearerForwarding`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["BearerForwarding"]


@dataclass(frozen=True, slots=True)
class BearerForwarding:
    """A source's configured headers, and whether its callers' bearers go on with its calls."""

    configured: Mapping[str, str]
    """The headers the source's config gives every request."""
    forwards: bool
    """Whether a caller's `Authorization` is sent on (forwarding on, no explicit header)."""

    @classmethod
    def of(cls, headers: Mapping[str, str], *, forward_inbound_auth: bool) -> BearerForwarding:
        """The rule for a source configured with `headers` and `forwardInboundAuth`."""
        configured = dict(headers)
        explicit = any(name.lower() == "authorization" for name in configured)
        return cls(configured, forward_inbound_auth and not explicit)

    def bearer(self, inbound_auth: str | None) -> str | None:
        """The caller's bearer to send on, or None (not forwarding, or a caller without one)."""
        return inbound_auth if self.forwards and inbound_auth else None

    def headers(self, bearer: str | None) -> dict[str, str]:
        """A call's headers: the configured ones, with `bearer` as its `Authorization` if given."""
        return {**self.configured, "Authorization": bearer} if bearer is not None else dict(self.configured)
