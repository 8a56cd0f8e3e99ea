"""A2A beside MCP (docs/api.md §3 "A2A"): the Agent Card, the JSON-RPC binding, the executor."""

from pallas_runtime.server.a2a.surface import A2ASurface

__all__ = ["A2ASurface"]
