"""Running PallasTriggers in a process: the runs, the schedule loops and the webhook endpoint.

- `call`: one run's MCP call to its agent (`send_message` over Streamable HTTP, fastmcp's client);
- `engine`: a trigger's runs (concurrency, rate bound, history, metrics, delivery);
- `clock`: the schedule loop of a schedule trigger;
- `webhook`: the HTTP endpoint of webhook triggers (signature first, body bounded);
- `host`: a process's schedule loops and webhook listener together (`pallas run`).

The rules are `pallas_api.triggers` (pure); this package is their I/O.
"""
