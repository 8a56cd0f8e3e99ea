"""CPU to ready: what `pallas agent` does up to `/readyz` answering 200, then exit.

    farm-style: /usr/bin/time -v .venv/bin/python bench/agent_to_ready.py

For timing a start on a loaded machine, where the wall time of `bench/cold_start.py` swings 2x
from run to run: a whole-process timer (user + sys CPU, peak RSS) of this script is steadier.
It imports what the command imports, builds the bench agent of `bench/agent_bench.py` (OpenAI
provider, memory store, A2A on by default) with `build_server` and `agent_app`, runs the
server's lifespan until it says ready, and exits: what an agent loads after ready (the provider
and A2A SDKs, issue 53) is not counted. Pair it with a baseline checkout's code by putting that
checkout's package folders first on `PYTHONPATH`.
"""

from __future__ import annotations

import asyncio
import os
import time

START = time.perf_counter()

from pallas_api.config import parse_config  # noqa: E402  # timed: the imports are the start
from pallas_runtime.commands.agent import AgentCommand  # noqa: E402, F401  # the command's imports
from pallas_runtime.server import agent_app, build_server  # noqa: E402

CONFIG = {
    "name": "bench",
    "model": "bench-model",
    "instruction": "You help.",
    "provider": {"name": "fake", "type": "openai", "baseURL": "http://127.0.0.1:9/v1", "maxRetries": 0},
    # Nothing listens on port 9: the preflight (after ready here, concurrent with it before)
    # fails at once and warns, as it would against a model server still starting.
    "servers": [{"name": "echo0", "url": "http://127.0.0.1:9/mcp"}],
}


async def main() -> None:
    server = build_server(parse_config(CONFIG), environ={})
    agent_app(server)
    async with server.mcp._lifespan_manager():
        assert server.ready
        print(
            f"ready after {time.perf_counter() - START:.2f} s (in-process, from the first import)", flush=True
        )
        # Out at once: an orderly exit would wait for the loads started after ready.
        os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
