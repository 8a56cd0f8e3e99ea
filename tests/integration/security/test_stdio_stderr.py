"""A stdio server (run by `pallas run` or `pallas bridge --command`) flooding its stderr.

Each stderr line of a child server became one log line: 300,000 lines made 84 MB of log, and
any server a user installs can do it (a crash loop, a debug flag, or on purpose). Now the lines
are rate-limited per server: a burst goes to the log, then a steady rate, and what is dropped is
counted in one line saying how many. The pipe is still read to its end, so the server never
blocks on a full pipe.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from pallas_runtime.stdio.links import STDERR_BURST, ChildProcess

LINES = 100_000
SPEW = f"import sys\nfor i in range({LINES}): sys.stderr.write(f'noise {{i}} ' + 'x' * 80 + '\\n')\n"


async def test_a_flood_of_stderr_lines_is_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pallas.stdio")
    link = ChildProcess("noisy", sys.executable, ["-c", SPEW + "sys.stderr.write('last words\\n')"], {})
    async with link.open() as pipes:
        await asyncio.wait_for(pipes.output.read(), 30)  # its stdout ends when it exits
    said = [r.getMessage() for r in caplog.records if r.name == "pallas.stdio"]
    relayed = [m for m in said if m.startswith("noisy: noise ")]
    dropped = [m for m in said if "stderr lines dropped" in m]
    assert len(relayed) <= STDERR_BURST + 200, f"{len(relayed)} of {LINES} stderr lines logged"
    assert relayed[0] == "noisy: noise 0 " + "x" * 80
    assert dropped, said[-5:]
    counted = sum(int(m.split(": ", 1)[1].split()[0]) for m in dropped)
    assert counted + len(relayed) + 1 >= LINES  # every line logged or counted ("last words" maybe either)
