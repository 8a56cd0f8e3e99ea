"""One agent as a Streamable-HTTP MCP server (docs/api.md §3), built from small parts.

- `agent_server`: `AgentServer` (owns the FastMCP instance, the metrics, the calls in flight,
  the session limits, the refusal count and readiness; runs the lifespan) and `build_server`.
- The surface, one part each: `send_message` (the tool, its alias `<agent>` and their metrics),
  `get_health`, `conversation_tools` (`create_conversation`, `list_conversations`, `delete_conversation`),
  `history_prompt` (`<agent>_history`), `instruction_resource` (`pallas://instruction`),
  `probe_routes` (`/healthz`, `/readyz`, `/metrics`), `server_card` (the MCP Server Card at
  `/mcp/server-card`), `gateway_tools` (`list_servers`,
  `get_server_tools`, `execute_tool` for the agent's clients, with `toolExposure.gateway`).
- `tasks`: the MCP tasks extension on `send_message` (`tasks/get`, `tasks/update`,
  `tasks/cancel`); `held`: turns that outlive their request (tasks, approvals over MRTR,
  resumable calls).
- `turn_entry`: `TurnEntry`, where every turn starts whichever protocol asked for it (MCP's
  `send_message`, A2A's `SendMessage`): the checks, the turn in flight, the coded failure.
- `a2a`: the A2A surface beside MCP (the Agent Card, the JSON-RPC binding at `/a2a`, the
  executor mapping an A2A message onto a turn, the bounded per-caller task store).
- `deferred_a2a`: `DeferredA2A`, the A2A routes served from the start with the SDK and the
  surface loaded after ready (issue 53).
- What the parts share: `descriptions` (names and texts), `tool_errors` (coded error results),
  `request` (what a call reads from its request), `conversation_gauge`.
- `edge`: `agent_app`, the HTTP app with its guards (body limit, one credential, one request
  per id, the session table).
- `warm_up` (imports done before ready).

Unit tests drive it in memory with `fastmcp.Client(server.mcp)`; the HTTP tier tests what needs
the network.
"""

from pallas_runtime.server.agent_server import AgentServer, build_server
from pallas_runtime.server.edge import agent_app

__all__ = ["AgentServer", "agent_app", "build_server"]
