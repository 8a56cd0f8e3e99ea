"""MCP clients to downstream servers and other agents, and their health probes."""
