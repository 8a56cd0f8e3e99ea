"""A2A beside MCP (docs/api.md §3 "A2A"): the Agent Card, the JSON-RPC binding, the executor.

The A2A SDK treats its SQL stores (tasks, push-notification configs, cluster event streams) as
optional, the `a2a-sdk[sql]` extra, yet its packages import them whenever sqlalchemy is installed,
as it is here for the conversation store: about 0.6 s of every agent's start and 18 MB of its RSS,
for stores an agent never uses (its tasks are kept by `tasks.py`). Marking those modules
unimportable before the SDK loads gives every agent the SDK as installed without the extra: the
SDK then binds placeholders for them, as it does in that configuration.
"""

import sys

_UNUSED_SQL_STORES = (
    "a2a.server.tasks.database_task_store",
    "a2a.server.tasks.database_push_notification_config_store",
    "a2a.server.cluster.database_event_stream",
    "a2a.server.cluster.database_task_store",
)
for _module in _UNUSED_SQL_STORES:
    sys.modules.setdefault(_module, None)  # type: ignore[arg-type]  # None: "cannot be imported"

from pallas_runtime.server.a2a.surface import A2ASurface  # noqa: E402  # after the marking

__all__ = ["A2ASurface"]
