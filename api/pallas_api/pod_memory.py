"""The memory an agent pod needs, derived from the bounds its spec sets on what the agent keeps.

An agent process holds a fixed part (the interpreter, fastmcp, an LLM SDK, requests in flight)
and the parts its spec bounds: conversations kept in memory (`history.maxBytes`) and open MCP
sessions (`sessions.maxSessions`). The operator
gives an agent pod that sets no `resources` this much as its memory limit, so raising a bound
raises the limit with it and the pod is not OOM-killed for holding what its spec allows.
"""

from __future__ import annotations

from pallas_api.fields import MiB
from pallas_api.spec import PallasAgentSpec

PROCESS_BYTES = 768 * MiB
"""The process without conversations: ~125 MB idle (fastmcp ~77 MB, an LLM SDK, the state
store); the rest is for calls in flight, which no setting bounds yet: one carries up to a 4 MiB
body and 8 MiB tool results per tool call, and the copies made of them, so this leaves room for
a dozen or so heavy calls at once."""
HISTORY_FACTOR = 2
"""Bytes of resident memory per byte of `history.maxBytes`: a 64 MiB `history.maxBytes` grew a process by
74 MB under 1 GiB of transcripts (tests/integration/security/test_memory_bound.py); twice
leaves room for the allocator's fragmentation and for a database store decoding a transcript
while its cache still holds the previous one."""
SESSION_BYTES = 64 * 1024
"""Per open MCP session: the SDK's transport, streams and tasks measured ~40 KiB (2,000 idle
sessions grew a process by 79 MB), and the session's ledger of conversation ids at most 16 KiB."""
ROUND_TO = 64 * MiB


def agent_memory_bytes(agent: PallasAgentSpec) -> int:
    """The memory limit an agent pod gets by default, in bytes (a multiple of 64 MiB)."""
    needed = (
        PROCESS_BYTES + HISTORY_FACTOR * agent.history.max_bytes + SESSION_BYTES * agent.sessions.max_sessions
    )
    return -(-needed // ROUND_TO) * ROUND_TO


def memory_quantity(size: int) -> str:
    """A Kubernetes quantity in MiB, e.g. `640Mi`."""
    return f"{-(-size // MiB)}Mi"
