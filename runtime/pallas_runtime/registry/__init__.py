"""The registry: a live MCP catalogue of Pallas agents (docs/api.md §4, docs/registry.md).

Layers, from pure to I/O:

- `state.AgentState` — one provider-neutral record per agent (spec- and status-derived fields).
- `builder.build_response(state)` — the agent's registry entry (`ServerResponse`), validated by
  `schema.validate_response` (the official 2025-12-11 schema plus the registry envelope).
- `catalogue.CatalogueStore` — states in, immutable versioned `Catalogue` snapshots out.
- Sources (`source.CatalogueSource`): `kubernetes.KubernetesSource` (list+watch, `pallas
  registry`), `static.StaticSource` (local agents polled over MCP, `pallas run`),
  `source.MemorySource` (states handed in by the caller).
- `app.build_app(source)` — the Starlette app; `serve.serve_registry(source, host, port)` —
  uvicorn around it, stopped by cancelling.

Use from `pallas run` (agents already started on their loopback ports):

    from pallas_runtime.registry import serve_registry
    from pallas_runtime.registry.static import LocalAgent, StaticSource

    source = StaticSource(
        [LocalAgent(name, agent_spec, deployment_spec, f"http://127.0.0.1:{port}/mcp",
                    deployment_name="ouranos", namespace="agents"), ...],
        poll_interval=5.0,      # seconds between get_health polls once all agents answered
        probe_timeout=5.0,      # budget of one agent's tools/list + get_health
    )
    started = asyncio.Event()
    task = asyncio.create_task(serve_registry(source, "127.0.0.1", base_port, started=started))
    await started.wait()        # listening; OSError from the task if the port is taken
    ...
    task.cancel()               # graceful stop (the source stops with it)

`serve_registry` leaves signal handlers alone; `build_app(source)` gives the ASGI app for
embedding elsewhere (its lifespan runs the source). `kubernetes` and `static` are not imported
here: they pull in lightkube and fastmcp, which the other one does not need.
"""

from pallas_runtime.registry.app import build_app
from pallas_runtime.registry.builder import VENDOR_META, InvalidAgent, build_response
from pallas_runtime.registry.catalogue import Catalogue, CatalogueStore, Entry
from pallas_runtime.registry.metrics import RegistryMetrics
from pallas_runtime.registry.schema import (
    OFFICIAL_META,
    SCHEMA_URL,
    SchemaError,
    validate_response,
    validate_server,
)
from pallas_runtime.registry.serve import serve_registry
from pallas_runtime.registry.source import CatalogueSource, MemorySource
from pallas_runtime.registry.state import AgentState, Health

__all__ = [
    "OFFICIAL_META",
    "SCHEMA_URL",
    "VENDOR_META",
    "AgentState",
    "Catalogue",
    "CatalogueSource",
    "CatalogueStore",
    "Entry",
    "Health",
    "InvalidAgent",
    "MemorySource",
    "RegistryMetrics",
    "SchemaError",
    "build_app",
    "build_response",
    "serve_registry",
    "validate_response",
    "validate_server",
]
