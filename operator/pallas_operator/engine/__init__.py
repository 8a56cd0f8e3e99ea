"""The operator's engine, under the kopf wiring: what a running operator keeps and does.

- `world`: what kopf's indexes hold, read through typed questions (a reconcile's only input);
- `queue`: the keyed work queue every trigger ends in (one reconcile per key at a time);
- `prober`: one task per available agent verifying it and calling its `get_health`;
- `checks`: those two MCP checks, through the one MCP probe (`pallas_io.probe`);
- `startup`: whether initial indexing finished, i.e. whether the operator can act (readiness);
- `context`: the `Operator` tying them together for one run.
"""
