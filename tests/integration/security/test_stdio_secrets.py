"""A stdio server echoing a value its `stdio.env` took from a Secret.

An agent scrubs the values it knows to be secret (its API key, its servers' Secret-backed
headers) from every tool result, but a hosted stdio server's `env` values are resolved for the
bridge, not the agent: a server returning its token (a debug tool, an error message quoting its
configuration) handed it to the model, the conversation and the caller. The bridge now scrubs
its server's Secret values from results as the agent does, so they never leave it.
"""

from __future__ import annotations

import sys

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_api import names
from pallas_runtime.stdio.bridge import Bridge
from pallas_runtime.stdio.links import ChildProcess, child_environment
from tests.support.agents import QUIET_FASTMCP_ENV
from tests.support.mcp_servers import serve_app

TOKEN = "tok-3f9c2e7a51"
CREDENTIAL = "the-deployments-bridge-credential"
SERVER = """
import os
from fastmcp import FastMCP

mcp = FastMCP("leaky")


@mcp.tool
def whoami() -> str:
    return "my token is " + os.environ["API_TOKEN"]


mcp.run(show_banner=False)
"""


async def test_a_stdio_servers_secret_never_leaves_its_bridge() -> None:
    env = child_environment({"API_TOKEN": TOKEN, **QUIET_FASTMCP_ENV})
    bridge = Bridge(
        "leaky",
        lambda: ChildProcess("leaky", sys.executable, ["-c", SERVER], env),
        token=lambda: CREDENTIAL,
        secrets=[TOKEN],
    )
    transport = StreamableHttpTransport  # the deployment's agents send its bridge credential
    async with (
        serve_app(bridge.app()) as running,
        Client(transport(running.url, headers={names.BRIDGE_TOKEN_HEADER: CREDENTIAL}), timeout=30) as client,
    ):
        result = await client.call_tool("whoami", {})
    text = str(result.content[0].text)  # type: ignore[union-attr]
    assert TOKEN not in text
    assert text == "my token is [redacted]"
