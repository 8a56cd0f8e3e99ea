"""The HTTP edge: the guards every request meets before the MCP server reads it.

Shared by the agent's app (`server/edge.py`, `agent_app`) and the stdio bridge
(`stdio/bridge.py`), so both refuse the same way: `sessions` and `session_adoption` (the MCP
sessions within the pod, a session another replica opened taken on), `draining` (new sessions
refused while the agent stops, and `refusal_pause`, how a client reads that refusal),
`request_limit` (the body limit), `request_ids` (one JSON-RPC id in flight per session) and
`credential` (one `Authorization` header per request, and the one credential an agent forwards).
"""
