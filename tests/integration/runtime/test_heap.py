"""The serving processes' garbage-collector settings (`pallas_io.heap`), in a fresh interpreter each.

A subprocess, because freezing the heap is for the whole process: pytest's own would stay frozen.
"""

from __future__ import annotations

import json
import subprocess
import sys

from pallas_io import heap

_FIGURES = "json.dumps([gc.get_threshold(), gc.get_freeze_count(), gc.get_count()[0]])"
_REPORT = f"import gc, json\nprint({_FIGURES})"


def _run(program: str) -> tuple[list[int], int, int]:
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    threshold, frozen, young = json.loads(out.stdout.strip().splitlines()[-1])
    return threshold, frozen, young


def test_settle_freezes_what_the_heap_holds_and_collects_the_young_less_often() -> None:
    before, frozen_before, _ = _run(_REPORT)
    threshold, frozen, young = _run(
        f"import pallas_io.serving\nfrom pallas_io import heap\nheap.settle()\n{_REPORT}"
    )

    assert frozen_before == 0
    assert frozen > 10_000  # the imports' objects, out of every later collection
    assert threshold == [heap.YOUNG_THRESHOLD, before[1], before[2]]
    assert young < 100  # collected just before: nothing young is left over


def test_settle_twice_keeps_the_settings() -> None:
    threshold, frozen, _ = _run(f"from pallas_io import heap\nheap.settle()\nheap.settle()\n{_REPORT}")

    assert threshold[0] == heap.YOUNG_THRESHOLD
    assert frozen > 0


def test_a_serving_command_settles_the_heap_before_its_loop_runs() -> None:
    program = (
        "import asyncio, gc, json\n"
        "from pallas_io.serving import run_server_loop\n"
        "async def main():\n"
        f"    print({_FIGURES})\n"
        "run_server_loop(main())\n"
    )
    threshold, frozen, _ = _run(program)

    assert threshold[0] == heap.YOUNG_THRESHOLD
    assert frozen > 10_000
