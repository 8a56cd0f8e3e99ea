"""An agent on the memory store keeps its spend in memory and never imports the database layer.

Nor does its A2A surface (on by default), whose SDK would import its own SQL stores.
"""

from __future__ import annotations

import subprocess
import sys


def test_a_memory_store_agent_starts_without_sqlalchemy_or_the_database_drivers() -> None:
    code = (
        "import sys, pallas_runtime.server, pallas_runtime.commands.agent, pallas_runtime.server.a2a;"
        "from pallas_runtime.conversations.memory import MemoryStore;"
        "from pallas_runtime.spending.factory import ledger_for;"
        "from pallas_runtime.spending.ledger import MemoryLedger;"
        "assert isinstance(ledger_for(MemoryStore(max_conversations=2, max_messages=10)), MemoryLedger);"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'asyncpg', 'aiosqlite'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
