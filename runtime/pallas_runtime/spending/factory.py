"""The ledger an agent's conversation store asks for (as `conversations.factory` builds the store).

A module of its own, above both ledgers: `sql_ledger` imports `ledger`'s `Bucket` and `Spent`, so
a factory inside `ledger` had to import `sql_ledger` back (an import circle, hidden in a function).
"""

from __future__ import annotations

from pallas_runtime.conversations.memory import MemoryStore
from pallas_runtime.conversations.model import ConversationStore
from pallas_runtime.spending.ledger import Ledger, MemoryLedger


def ledger_for(store: ConversationStore) -> Ledger:
    """Spend kept where the conversations are: a database store's tables, else in memory.

    The SQL ledger (and sqlalchemy with it) is imported only for a database store.
    """
    if isinstance(store, MemoryStore):
        return MemoryLedger()
    from pallas_runtime.conversations.sql import SqlStore
    from pallas_runtime.spending.sql_ledger import SqlLedger

    return SqlLedger(store) if isinstance(store, SqlStore) else MemoryLedger()
