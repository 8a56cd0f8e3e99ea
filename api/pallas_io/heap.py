"""The garbage collector's settings for a serving process (an agent, the registry, a stdio bridge).

A server's heap is mostly what its imports left (an agent: ~185,000 objects: fastmcp, the MCP
SDK, pydantic's schemas), and none of it is ever garbage. With CPython's defaults a full
collection walks all of it about every 125 messages, and a young collection runs every 700
allocations: 15 % of an agent's CPU under load went to the collector (docs/runtime.md, "What
the garbage collector cost"). `serving.run_server_loop` calls `settle` once the command has
built its app, before the server listens:

- collect once and freeze what survives: the start-up heap leaves the collector's
  generations for good (`gc.freeze`), so a full collection walks only what serving made;
- collect the young generation every `YOUNG_THRESHOLD` container allocations instead of 700:
  at 700 more than one young collection ran per message (and every tenth a middle one), each
  with its fixed cost and a walk of what was young; most of a message's objects are freed by
  reference counting anyway, and its cycles wait a little longer.

Reference cycles still go: later, in larger batches.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "settle"]

YOUNG_THRESHOLD = 10_000
"""Container allocations (net of frees) between two collections of the youngest generation.

CPython's default is 700. 10,000 cut the collector's share of an agent's CPU from 15 % to 4 %
(docs/runtime.md); larger values cut little more and make each pause longer."""


def settle() -> None:
    """Collect, freeze the heap that survives, and collect the young less often (idempotent)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
