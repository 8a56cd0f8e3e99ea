"""Cold start: how long `pallas agent` takes to be ready, its idle RSS, and where the time goes.

    .venv/bin/python bench/cold_start.py [--starts 7] [--imports 14] [--baseline CHECKOUT]

Starts the bench agent of `bench/agent_bench.py` (OpenAI provider against the fake, one echo
downstream, memory store, A2A on by default) `--starts` times, pinned to CPU 0 as there, and
prints the median time from the process's start until `/readyz` answers 200 and its RSS a second
later. Then one more start with `PYTHONPROFILEIMPORTTIME=1` prints the `--imports` top-level
packages with the most import time of their own (what `python -X importtime` reports, summed per
package; it inflates every figure a little).

With `--baseline` (another checkout of the product, e.g. `git worktree add --detach ../base main`)
the starts alternate, baseline then this tree, on the same interpreter and libraries (the
baseline's packages put first on `PYTHONPATH`), so a loaded machine's drift falls on both alike;
each side gets its figures and its import profile.

Targets (issue 53): start to ready <= 1.5 s; idle RSS <= 100 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import agent_bench as ab

from tests.support.mcp_servers import header_echo_server

_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)")


def import_profile(log: str, top: int) -> list[tuple[str, float]]:
    """Seconds of import time of their own per top-level package, most first."""
    own: dict[str, float] = collections.defaultdict(float)
    for line in log.splitlines():
        if match := _IMPORT_LINE.match(line):
            own[match[2].split(".")[0]] += int(match[1]) / 1e6
    most = sorted(own.items(), key=lambda item: item[1], reverse=True)[:top]
    return [("(all)", sum(own.values())), *most]


PACKAGE_FOLDERS = ("api", "runtime", "registry", "operator")
"""Where a checkout keeps its packages (pyproject's `packages.find`)."""


def checkout_env(checkout: Path | None) -> dict[str, str]:
    """The environment that runs `checkout`'s code instead of the installed tree (none: this tree)."""
    if checkout is None:
        return {}
    return {"PYTHONPATH": os.pathsep.join(str(checkout / folder) for folder in PACKAGE_FOLDERS)}


async def main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {1})
    sides = {"this tree": None} if args.baseline is None else {"baseline": args.baseline, "this tree": None}
    starts: dict[str, list[float]] = {side: [] for side in sides}
    rss: dict[str, list[float]] = {side: [] for side in sides}
    logs: dict[str, str] = {}
    async with contextlib.AsyncExitStack() as stack:
        llm = await stack.enter_async_context(ab.BenchLLM())
        echo = await stack.enter_async_context(header_echo_server())
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cold-start-")))
        servers = {"echo0": echo.url}
        for _ in range(args.starts):
            for side, checkout in sides.items():
                async with ab.pallas(tmp, llm, servers, env=checkout_env(checkout)) as target:
                    await asyncio.sleep(1)
                    starts[side].append(target.start)
                    rss[side].append(ab.rss_mb(target.pid))
        for side, checkout in sides.items():
            env = {"PYTHONPROFILEIMPORTTIME": "1", **checkout_env(checkout)}
            async with ab.pallas(tmp, llm, servers, "profiled", env=env):
                logs[side] = (tmp / "profiled.log").read_text()  # up to ready: the deferred come after
    for side in sides:
        print(f"{side}:")
        print(
            f"  start to ready: {statistics.median(starts[side]):.2f} s "
            f"(median of {len(starts[side])}; target <= 1.5 s)"
        )
        print(f"    each: {', '.join(f'{s:.2f}' for s in starts[side])}")
        print(f"  idle RSS: {statistics.median(rss[side]):.1f} MB (median; target <= 100 MB)")
        print("  import time of their own, per top-level package (python -X importtime, up to ready):")
        for package, seconds in import_profile(logs[side], args.imports):
            print(f"    {seconds:6.2f} s  {package}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=7, help="timed starts")
    parser.add_argument("--imports", type=int, default=14, help="packages in the import profile")
    parser.add_argument("--baseline", type=Path, help="a checkout to alternate starts with (before/after)")
    asyncio.run(main(parser.parse_args()))
