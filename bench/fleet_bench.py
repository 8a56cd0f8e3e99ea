"""Fleet endpoint benchmark: what the registry's `/mcp` adds to a message; prints figures.

    .venv/bin/python bench/fleet_bench.py [--calls 300] [--rounds 3]

`pallas run` hosts two agents on a zero-latency fake LLM (served by this process) and the
registry. One MCP client (legacy mode, one session) sends `send_message` to the worker directly,
another calls the worker's tool on the registry's `/mcp`, which relays it to the worker; the
calls alternate, `--calls` of each per round, after a warm-up. Printed: P50/P95 of both and the
difference at P50.

Target (issue 51): the fleet adds at most 5 ms at P50 to a relayed message.
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

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fastmcp import Client  # noqa: E402

from tests.integration.runtime.test_run_command import manifests, pallas_run, registry_up  # noqa: E402
from tests.support.fake_llm import FakeOpenAI, Text  # noqa: E402
from tests.support.mcp_peers import free_ports  # noqa: E402


def quantiles_ms(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100)
    return {"p50_ms": round(cuts[49] * 1000, 2), "p95_ms": round(cuts[94] * 1000, 2)}


async def timed(client: Client[Any], tool: str) -> float:
    started = time.perf_counter()
    result = await client.call_tool(tool, {"message": "hi"})
    elapsed = time.perf_counter() - started
    assert getattr(result.content[0], "text", None) == "ok", result
    return elapsed


async def main(calls: int, rounds: int) -> None:
    async with FakeOpenAI(default=Text("ok")) as llm:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "agents.yaml"
            path.write_text(yaml.safe_dump_all(manifests(llm)))
            base = free_ports(3)
            async with pallas_run(path, base, log=Path(tmp) / "run.log"):
                await registry_up(base)
                direct_url, fleet_url = f"http://127.0.0.1:{base + 2}/mcp", f"http://127.0.0.1:{base}/mcp"
                async with (
                    Client(direct_url, mode="legacy") as direct,
                    Client(fleet_url, mode="legacy") as fleet,
                ):
                    for _ in range(20):  # warm-up: connections, imports, the relay's session
                        await timed(direct, "send_message")
                        await timed(fleet, "worker")
                    figures = []
                    for _ in range(rounds):
                        direct_s, fleet_s = [], []
                        for _ in range(calls):
                            direct_s.append(await timed(direct, "send_message"))
                            fleet_s.append(await timed(fleet, "worker"))
                        d, f = quantiles_ms(direct_s), quantiles_ms(fleet_s)
                        figures.append(
                            {"direct": d, "fleet": f, "added_p50_ms": round(f["p50_ms"] - d["p50_ms"], 2)}
                        )
    print(json.dumps({"calls": calls, "rounds": figures}, indent=2))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (("--calls", 300), ("--rounds", 3)):
        parser.add_argument(flag, type=int, default=default)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(**vars(parse())))
