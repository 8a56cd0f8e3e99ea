"""Pallas agent runtime: every agent an MCP server that thinks with an LLM and acts through MCP tools."""

from pallas_io.commands import installed_version

__version__ = installed_version()
