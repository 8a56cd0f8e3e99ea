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


STARTED = """
import asyncio, sys
from pallas_api.config import parse_config
from pallas_runtime.server import agent_app, build_server
HEAVY = {"openai", "a2a"}
ready_at_import = {}
class Watch:  # records whether the agent said ready when each heavy SDK began to load
    def find_spec(self, name, path=None, target=None):
        if name in HEAVY and name not in ready_at_import:
            ready_at_import[name] = server.ready
        return None
sys.meta_path.insert(0, Watch())
config = parse_config({
    "name": "lazy", "model": "m", "instruction": "hi",
    "provider": {"name": "llm", "type": "openai", "baseURL": "http://127.0.0.1:9/v1", "maxRetries": 0},
})
server = build_server(config, environ={})
app = agent_app(server)
async def main():
    async with server.mcp._lifespan_manager():
        await asyncio.gather(server.a2a.load(), server.live.generation.provider.load())
        print(sorted(ready_at_import.items()))
asyncio.run(main())
"""


def test_an_agent_says_ready_before_it_imports_its_provider_and_a2a_sdks() -> None:
    """Issue 53: no request but a turn needs the provider's SDK, none but A2A's the a2a-sdk."""
    out = subprocess.run([sys.executable, "-c", STARTED], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[('a2a', True), ('openai', True)]"
