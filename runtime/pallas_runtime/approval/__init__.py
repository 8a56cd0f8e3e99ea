"""Human approval of tool calls, asked of the client that started the turn (docs/api.md §3, "Approvals").

`question` holds what every layer shares: the form an approval is asked with, the caller's answer
read from it, and the turn's `Approver` (whom to ask). `elicit` speaks MCP: the agent's own
caller asked through `elicitation/create`, and a peer agent's question relayed to it.
"""
