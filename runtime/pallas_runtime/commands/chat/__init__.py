"""`pallas chat`: a terminal MCP client for one agent.

The command, its session, the REPL, the display and the per-call parameters.
"""
