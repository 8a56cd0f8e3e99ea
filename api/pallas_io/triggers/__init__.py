"""Running PallasTriggers, shared by `pallas run` and the operator (each hosts them its own way).

- `call`: one run's MCP call to its agent (`send_message` over Streamable HTTP, fastmcp's client);
- `runs`: a trigger's runs (concurrency, the per-minute bound, history, metrics, delivery);
- `clock`: the loop of a schedule trigger;
- `metrics`: the two metric families of trigger runs, one definition for every process.

The rules are `pallas_api.triggers` (pure); this package is their I/O.
"""
