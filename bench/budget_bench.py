"""Budget benchmark: what budgets add to each LLM call; prints figures, not a timed test.

    .venv/bin/python bench/budget_bench.py [--turns 100] [--calls 4] [--llm-ms 20]

Against the memory ledger, a SQLite file and a throw-away PostgreSQL on loopback (Debian's
server, started here), with an agent budget and a per-caller budget both set (two windows, both
counted on every call):

`--turns` turns of `--calls` LLM calls each, every call simulated as `--llm-ms` of waiting:

- check: `before_llm_call`, what runs before each LLM call: the check and the reservation (in
  memory: no I/O);
- charge: `after_llm_call`, what runs after it: the reservation released, the cost metric, the
  windows counted in memory,
  and the store's atomic increment of both windows started (it runs beside the next call);
- per_call: check + charge, what a budget adds to the path of one LLM call;
- open_per_turn: `Budgets.open`, once per turn (one read of both windows);
- settle_per_turn: what the turn's end waits for its increments still being stored;
- no_budget: `before_llm_call` + `after_llm_call` outside a budgeted turn (the cost metric only).

Target (issue 33): the budget check adds at most 1 ms per LLM call at P50.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pallas_api.config import AgentConfig, parse_config  # noqa: E402
from pallas_api.spending import ModelPrice  # noqa: E402
from pallas_runtime.conversations.caller import Caller  # noqa: E402
from pallas_runtime.conversations.sql import SqlStore, engine_url  # noqa: E402
from pallas_runtime.messages import Usage  # noqa: E402
from pallas_runtime.metrics import RuntimeMetrics  # noqa: E402
from pallas_runtime.spending import guard  # noqa: E402
from pallas_runtime.spending.ledger import Ledger, MemoryLedger  # noqa: E402
from pallas_runtime.spending.sql_ledger import SqlLedger  # noqa: E402
from tests.support.postgres import running_postgres  # noqa: E402

PRICE = ModelPrice(input=2.5, output=10, cached_input=1.25)
USAGE = Usage(input=1200, output=300, cache_read=400)
RESERVED = (1600, 4096)
"""What each call reserves: its estimated input and the room for its answer."""


class Quiet:
    """Progress that goes nowhere (the caller sent no progress token)."""

    async def note(self, message: str) -> None:
        """Drop the warning."""


def quantiles_ms(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100)
    return {"p50_ms": round(cuts[49] * 1000, 4), "p95_ms": round(cuts[94] * 1000, 4)}


def config() -> AgentConfig:
    huge = {"window": "day", "tokens": 10**14, "cost": 10**8}
    return parse_config(
        {
            "name": "bench",
            "model": "m",
            "provider": {"name": "p", "type": "openai"},
            "conversations": {"agentIdentity": f"bench/{time.monotonic_ns()}"},
            "budgets": {"agent": huge, "perCaller": huge},
        }
    )


async def timed(work: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await work()
    return time.perf_counter() - started


async def ledger_figures(ledger: Ledger, turns: int, calls: int, llm_seconds: float) -> dict[str, Any]:
    metrics = RuntimeMetrics(process_collectors=False)
    budgets, cfg, quiet = guard.Budgets(ledger, metrics), config(), Quiet()
    caller = Caller("sub:bench", "bench")
    check, charge, per_call, opened, settled = [], [], [], [], []
    spent = 0
    for _ in range(turns):
        started = time.perf_counter()
        turn = await budgets.open(cfg, caller, None)
        opened.append(time.perf_counter() - started)
        for _ in range(calls):
            started = time.perf_counter()
            held = await guard.before_llm_call(turn, quiet, PRICE, *RESERVED)
            a = time.perf_counter() - started
            await asyncio.sleep(llm_seconds)  # the LLM call; the previous charge is stored meanwhile
            after = partial(guard.after_llm_call, turn, metrics, "bench", "m", PRICE, USAGE, quiet, held)
            b = await timed(after)
            check.append(a)
            charge.append(b)
            per_call.append(a + b)
        settled.append(await timed(turn.settle))
        spent = turn.limits[0].spent.tokens
    return {
        "check": quantiles_ms(check),
        "charge": quantiles_ms(charge),
        "per_call": quantiles_ms(per_call),
        "open_per_turn": quantiles_ms(opened),
        "settle_per_turn": quantiles_ms(settled),
        "stored_tokens": spent,
    }


async def baseline(calls: int) -> dict[str, Any]:
    metrics, quiet, samples = RuntimeMetrics(process_collectors=False), Quiet(), []
    for _ in range(calls):
        samples.append(
            await timed(lambda: guard.before_llm_call(None, quiet))
            + await timed(lambda: guard.after_llm_call(None, metrics, "bench", "m", PRICE, USAGE, quiet))
        )
    return {"per_call": quantiles_ms(samples)}


async def main(turns: int, calls: int, llm_ms: float) -> dict[str, Any]:
    figures: dict[str, Any] = {"turns": turns, "llm_calls_per_turn": calls, "llm_ms": llm_ms}
    figures["no_budget"] = await baseline(turns * calls)
    figures["memory"] = await ledger_figures(MemoryLedger(), turns, calls, llm_ms / 1000)
    with running_postgres() as postgres, tempfile.TemporaryDirectory() as tmp:
        stores = {
            "sqlite": SqlStore("sqlite", engine_url("sqlite", str(Path(tmp) / "bench.db")), max_messages=200),
            "postgres": SqlStore("postgres", engine_url("postgres", postgres.dsn), max_messages=200),
        }
        for name, store in stores.items():
            await store.start()
            try:
                figures[name] = await ledger_figures(SqlLedger(store), turns, calls, llm_ms / 1000)
            finally:
                await store.aclose()
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100, help="turns per ledger")
    parser.add_argument("--calls", type=int, default=4, help="LLM calls per turn")
    parser.add_argument("--llm-ms", type=float, default=20.0, help="how long each (simulated) LLM call takes")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.turns, args.calls, args.llm_ms)), indent=2))
