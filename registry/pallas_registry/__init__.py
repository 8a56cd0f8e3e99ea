"""The registry: a live MCP catalogue of Pallas agents (docs/api.md §4, docs/registry.md).

Layers, from pure to I/O:

- `state.AgentState` — one provider-neutral record per agent (spec- and status-derived fields).
- `builder.build_response(state)` — the agent's registry entry (`ServerResponse`), validated by
  `schema.validate_response` (the official 2025-12-11 schema plus the registry envelope).
- `catalogue.CatalogueStore` — states in, immutable versioned `Catalogue` snapshots out.
- Sources (`source.CatalogueSource`): `kubernetes.KubernetesSource` (list+watch, `pallas
  registry`), `static.StaticSource` (local agents polled over MCP, `pallas run`),
  `source.MemorySource` (states handed in by the caller).
- `app.build_app(source)` — the Starlette app (its lifespan runs the source); serve it with
  `pallas_io.serving.serve(app, sock)`, stopped by cancelling.
- `fleet.Fleet` — the fleet as one MCP server, which the app serves at `/mcp`: the read-only
  tools of `fleet_facts` (`list_agents`, `get_agent_health`, `registry_health`) and one tool per
  agent relaying a message to it through the runtime's peer relay
  (`pallas_runtime.downstream.peer_agent`), behind `fleet_access` (the caller checked by the
  agents' own rules with the runtime's verifiers, `pallas_runtime.auth`: those two, and the
  tasks extension's wire shapes `pallas_runtime.task_wire`, are all the registry takes from the
  runtime); `fleet_tasks` relays an agent tool's task-augmented call as the agent's own task.
- Around them: `objects` (PallasDeployment / PallasAgent objects → states, pure), `reflector`
  (list-then-watch that survives expiry and outages), `naming` (server names and URLs in the
  schema's shapes), `query` (filters and keyset pages), `responses` (bodies, ETags, the per-version
  cache), `guard` (size limits, request metrics, no unhandled 500s), `providers` (the provider
  checks of a deployment), `agent_cards` (the agents' own cards at one URL: the A2A
  Agent Cards at `/a2a/agent-cards`, the MCP Server Cards in the MCP Catalog at
  `/.well-known/mcp/catalog.json`), `metrics`, and `command` (`pallas registry`).

Use from `pallas run` (agents already started on their loopback ports):

    from pallas_registry import build_app
    from pallas_registry.static import LocalAgent, StaticSource
    from pallas_io.serving import listen, serve

    source = StaticSource(
        [LocalAgent(name, agent_spec, deployment_spec, f"http://127.0.0.1:{port}/mcp",
                    deployment_name="ouranos", namespace="agents"), ...],
        poll_interval=5.0,      # seconds between get_health polls once all agents answered
        probe_timeout=5.0,      # budget of one agent's tools/list + get_health
    )
    started = asyncio.Event()
    sock = listen("127.0.0.1", base_port)  # OSError if the port is taken
    task = asyncio.create_task(serve(build_app(source), sock, started=started))
    await started.wait()
    ...
    task.cancel()               # graceful stop (the source stops with it)

`kubernetes` and `static` are not imported here: each pulls in what the other does not need.
"""

from pallas_registry.app import build_app
from pallas_registry.builder import VENDOR_META, InvalidAgent, build_response
from pallas_registry.catalogue import Catalogue, CatalogueStore, Entry
from pallas_registry.metrics import RegistryMetrics
from pallas_registry.schema import (
    OFFICIAL_META,
    SCHEMA_URL,
    SchemaError,
    validate_response,
    validate_server,
)
from pallas_registry.source import CatalogueSource, MemorySource
from pallas_registry.state import AgentState, HealthView

__all__ = [
    "OFFICIAL_META",
    "SCHEMA_URL",
    "VENDOR_META",
    "AgentState",
    "Catalogue",
    "CatalogueSource",
    "CatalogueStore",
    "Entry",
    "HealthView",
    "InvalidAgent",
    "MemorySource",
    "RegistryMetrics",
    "SchemaError",
    "build_app",
    "build_response",
    "validate_response",
    "validate_server",
]
