"""`KeyedLoops`: the per-key tasks of the prober, the report reader and the scaling loop."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from pallas_operator.engine.loops import KeyedLoops, Looping


async def test_a_loop_woken_by_a_new_target_and_stopped_at_once_stops() -> None:
    rounds: list[int] = []

    async def run(key: Hashable, state: Looping[int]) -> None:
        while True:
            rounds.append(state.target)
            await state.pause(3600)

    loops = KeyedLoops[int, Looping[int]](Looping, run, "test")
    loops.track("a", 1)
    await asyncio.sleep(0)  # its first round, then it pauses
    task = loops.get("a").task  # type: ignore[union-attr]

    loops.track("a", 2)  # wakes it; the stop comes before it runs again
    async with asyncio.timeout(2):
        await loops.stop()

    assert task is not None
    assert task.cancelled()
    assert rounds == [1]
