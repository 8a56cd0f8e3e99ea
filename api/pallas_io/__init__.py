"""What the Pallas programs share at their edges: the I/O and process conventions beside the contract.

`pallas_api` is the contract (types, names, rendering, CRDs) and does no I/O; this sibling holds
what the operator, the agent runtime and the registry do alike when they touch the world:

- `probe`: the one MCP probe, checking an endpoint against the agent surface over HTTP;
- `llm_check`: the one LLM provider check (models endpoint and key), for the agents and the registry;
- `logs`: one logging setup for every process (JSON or console lines, fields, redaction);
- `tracing`: OpenTelemetry for every process, off unless `OTEL_*` says (spans, trace ids on log
  lines, exemplars, the inbound `traceparent`);
- `console`: the console lines for a person at a terminal, by rich;
- `paths`: where Pallas keeps state on a workstation (the XDG state directory);
- `secrets`: where a process finds its secret values (the environment, or a Secret volume's
  files read at each lookup);
- `commands`: the command-line conventions of every `pallas` command (exit codes, ports,
  request-limit flags, the `pallas.commands` entry point);
- `kube`: the custom resources as lightkube resource classes, for every API-server client;
- `serving`, `http_limits`: serving an ASGI app with uvicorn, one way for the agents, the registry
  and `pallas run`, every request head bounded in size, field count and time before the app;
- `heap`: the garbage collector's settings of a serving process (the start-up heap frozen);
- `backoff`: the one exponential backoff (the pause before a retry), pure arithmetic;
- `triggers`: running PallasTriggers (the MCP call, the runs' policies and records, the schedule
  loop), for `pallas run` and the operator alike.

It may import `pallas_api`, never the operator, the runtime or the registry; `pallas_api` never imports it
(contracts in pyproject.toml).
"""
