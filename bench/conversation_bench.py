"""Conversation-store benchmark: prints figures; not a timed test.

    .venv/bin/python bench/conversation_bench.py [--turns 300] [--sends 300] [--rounds 3]

Two measurements, each against a throw-away PostgreSQL on loopback (Debian's server, started
here) and a SQLite file, with the memory store as the baseline:

- store: one turn held, appended and released (`turn` + `commit`), then the history read back,
  on one conversation growing to `--turns` turns (trimmed at 200 messages, as agents do);
- send_message: `pallas agent` in a process of its own (as deployed), a zero-latency fake LLM
  served by this process, `--sends` sequential calls from one MCP client in one conversation;
  the added cost of each store over memory (`--rounds` rounds, the stores interleaved).

Target (issue 10): SQLite and PostgreSQL add at most 2 ms at P50 to send_message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fastmcp import Client  # noqa: E402
from fastmcp.client.transports import StreamableHttpTransport  # noqa: E402

from pallas_runtime.conversations.memory import MemoryStore  # noqa: E402
from pallas_runtime.conversations.model import ConversationKey, ConversationStore  # noqa: E402
from pallas_runtime.conversations.sql import SqlStore, engine_url  # noqa: E402
from tests.support.agents import agent_config, run_agent_process  # noqa: E402
from tests.support.conversations import turn  # noqa: E402
from tests.support.fake_llm import FakeOpenAI, Text  # noqa: E402
from tests.support.postgres import running_postgres  # noqa: E402


def quantiles_ms(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100)
    return {"p50_ms": round(cuts[49] * 1000, 2), "p95_ms": round(cuts[94] * 1000, 2)}


async def store_figures(store: ConversationStore, turns: int) -> dict[str, Any]:
    await store.start()
    key = ConversationKey("bench", "anonymous", f"c-{time.monotonic_ns()}")
    append, read = [], []
    try:
        for n in range(turns):
            started = time.perf_counter()
            async with store.turn(key) as held:
                await held.commit(turn(n, with_tools=n % 3 == 0), "bench")
            append.append(time.perf_counter() - started)
            started = time.perf_counter()
            await store.history(key)
            read.append(time.perf_counter() - started)
    finally:
        await store.aclose()
    return {"append": quantiles_ms(append), "history_read": quantiles_ms(read)}


async def send_figures(store: dict[str, Any], environ: dict[str, str], sends: int) -> dict[str, float]:
    async with FakeOpenAI(default=Text("ok")) as llm:
        config = agent_config(llm.base_url, name="bench", conversations=store)
        async with run_agent_process(config, env=environ) as agent:
            transport = StreamableHttpTransport(agent.url)
            async with Client(transport, mode="legacy") as client:
                samples = []
                for n in range(sends + 20):
                    started = time.perf_counter()
                    await client.call_tool("send_message", {"message": f"m{n}", "conversation_id": "bench"})
                    if n >= 20:  # warm-up: connections, migrations, caches
                        samples.append(time.perf_counter() - started)
    return quantiles_ms(samples)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--sends", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with running_postgres() as postgres, tempfile.TemporaryDirectory() as tmp:
        sqlite_file = str(Path(tmp) / "bench.db")
        stores: dict[str, ConversationStore] = {
            "memory": MemoryStore(max_conversations=10, max_messages=200),
            "sqlite": SqlStore("sqlite", engine_url("sqlite", sqlite_file), max_messages=200),
            "postgres": SqlStore("postgres", engine_url("postgres", postgres.dsn), max_messages=200),
        }
        for kind, store in stores.items():
            figures = await store_figures(store, args.turns)
            print(json.dumps({"measure": "store", "store": kind, "turns": args.turns, **figures}), flush=True)
        configs = {
            "memory": {"type": "memory"},
            "sqlite": {"type": "sqlite", "sqlitePath": str(Path(tmp) / "agent.db")},
            "postgres": {"type": "postgres", "dsnEnv": "PALLAS_CONVERSATIONS_DSN"},
        }
        environ = {"PALLAS_CONVERSATIONS_DSN": postgres.dsn}
        # Rounds interleave the stores, so a change in the machine's load mid-run shifts all
        # three alike; each store's figure is its median over the rounds, "added" the median of
        # its per-round difference from memory.
        rounds = [
            {kind: await send_figures(cfg, environ, args.sends) for kind, cfg in configs.items()}
            for _ in range(args.rounds)
        ]
        for kind in configs:
            figures = {q: statistics.median(r[kind][q] for r in rounds) for q in ("p50_ms", "p95_ms")}
            added = {
                f"added_{q}": round(statistics.median(r[kind][q] - r["memory"][q] for r in rounds), 2)
                for q in ("p50_ms", "p95_ms")
            }
            print(
                json.dumps(
                    {"measure": "send_message", "store": kind, "sends": args.sends, "rounds": args.rounds}
                    | figures
                    | added
                )
            )


if __name__ == "__main__":
    asyncio.run(main())
