"""What only a real interpreter shows about an agent's start: the libraries' own imports.

Which of the product's modules import a heavy library at their top is read from the source in
`tests/unit/test_lazy_imports.py`. That walk cannot see what the libraries themselves import (a
release of fastmcp or of an SDK that pulls in another provider's SDK or sqlalchemy) nor the A2A
SDK's SQL stores, which `server/a2a/__init__.py` marks unimportable at run time. One interpreter
checks both: a default agent's modules load none of the heavy libraries, and an OpenAI agent
serving A2A on the memory store loads only its own SDK and the A2A SDK.
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
HEAVY = {"openai", "anthropic", "a2a", "sqlalchemy", "alembic", "asyncpg", "aiosqlite"}
def loaded():
    return sorted({m.split(".")[0] for m in sys.modules} & HEAVY)
import pallas_runtime.commands.agent, pallas_runtime.server
import pallas_runtime.agent.live, pallas_runtime.llm.factory
print(loaded())
import pallas_runtime.llm.openai_chat, pallas_runtime.llm.openai_responses, pallas_runtime.server.a2a
from pallas_runtime.conversations.memory import MemoryStore
from pallas_runtime.spending.factory import ledger_for
from pallas_runtime.spending.ledger import MemoryLedger
assert isinstance(ledger_for(MemoryStore(max_conversations=2, max_messages=10)), MemoryLedger)
print(loaded())
"""


def test_an_agent_loads_only_the_heavy_libraries_its_config_uses() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "['a2a', 'openai']"]
