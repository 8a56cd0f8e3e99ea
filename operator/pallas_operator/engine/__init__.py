"""The operator's engine, under the kopf wiring: what a running operator keeps and does.

- `indexes`, `world`: the operator's own indexes of every watched object (filled by the event
  handlers, not kopf's indexes), read through typed questions: a reconcile's only input;
- `startup`: the start-up barrier, whether every object that existed at start is recorded yet
  (readiness; the work queue starts then);
- `queue`: the keyed work queue every trigger ends in (one reconcile per key at a time);
- `loops`, `prober`, `verification`, `provider_reports`: one task per available agent verifying it
  and calling its `get_health` (through the one MCP probe, `pallas_io.probe`), one per registry
  reading its provider checks;
- `scaler`, `pod_activity`: one task per agent whose `scaling` applies, reading its ready pods'
  `/metrics` and setting its Deployment's replicas (docs/operator.md "Scaling");
- `triggers`: the PallasTriggers it fires, a run engine (`pallas_io.triggers`) and a schedule
  loop each, their status written at every change; `event_watches`: the watch of each kind
  event triggers name, shared by the triggers on it;
- `delegations`, `monitoring_checks`: what reconciles remember between runs (whether each
  auth-delegator binding exists; when each deployment's ServiceMonitors were last listed);
- `context`: the `Operator` tying them together for one run.
"""
