"""stdio MCP servers behind a Streamable HTTP bridge, so agents reach them like any other server.

`links` opens the server's stdin/stdout (a child process `pallas run` starts, or the FIFOs a pod
shares with the server's container), `lines` frames JSON-RPC messages on them, `supervisor` keeps
one initialized MCP session over a link and opens it again when the server ends, and `bridge`
serves it over Streamable HTTP with fastmcp's proxy.
"""
