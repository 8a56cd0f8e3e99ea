"""Pallas agent runtime: every agent an MCP server that thinks with an LLM and acts through MCP tools."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pallas")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
