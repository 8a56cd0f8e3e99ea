"""The day-2 soak: clients talking to agents on the real node while the cluster changes under them.

Shared by `bench/soak.py` (every event, figures printed) and `tests/e2e/test_day2_soak.py` (a
minute of traffic through the graceful events, asserting nothing is lost). One module each:

- `script`: what clients say and what the scripted fake LLM answers, so that every answer tells
  whether the model saw the conversation's earlier turns and nothing of another caller's (pure);
- `clients`: callers with identities of their own, holding conversations at a steady rate,
  reconnecting as a real client does, and reading their histories back;
- `world`: the servers on the node's bridge address (fake LLM, OIDC issuer, PostgreSQL), the
  namespace, the operator (`helm install`), the agents, and when the cluster has settled;
- `events`: the changes and crashes, one after another, each waiting until the world settled;
- `report`: sends grouped by event window, and the table;
- `run`: warm-up, each event, its settle time and the history check, then the report.
"""
