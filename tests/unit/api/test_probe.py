"""The MCP probe speaks the protocol version of the MCP SDK the product is built on."""

from __future__ import annotations

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

from pallas_io import probe


def test_probe_offers_the_version_the_sdk_client_offers():
    """The probe's `initialize` offers exactly the SDK client's version, not merely an accepted one.

    The probe checks an endpoint the way the product's MCP clients will use it (the agent's
    downstream and peer sessions are the SDK's `ClientSession`, whose `initialize` offers
    `LATEST_HANDSHAKE_VERSION`). An SDK server answers any version of
    `HANDSHAKE_PROTOCOL_VERSIONS` with that same version, so an older accepted one would have the
    probe pass against a server that fails at the version the agents negotiate. Not
    `LATEST_PROTOCOL_VERSION`: the newest revisions (`MODERN_PROTOCOL_VERSIONS`) have no
    `initialize` handshake at all, and the SDK routes a request carrying one to its stateless
    path. When an SDK upgrade moves the latest handshake version, this test fails so that the
    probe moves with it, deliberately.
    """
    assert probe.PROTOCOL_VERSION in HANDSHAKE_PROTOCOL_VERSIONS, "an SDK server would not negotiate it"
    assert probe.PROTOCOL_VERSION == LATEST_HANDSHAKE_VERSION
