"""The one poll-until-true of the test helpers: `until(what, probe, within)`.

The e2e helpers (`e2e.until`), the operator tests (`operator.eventually`), the conversation
contract checks (`conversations.until`, on the loop's clock for looptime) and the soak world
(`SoakWorld.until`, which outlasts API errors and raises instead of failing) all wait this way;
each is this function with its own interval, clock or failure.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, NoReturn

import pytest


def fail_test(message: str) -> NoReturn:
    """Fail the test with `message` alone (no traceback into the poll loop)."""
    pytest.fail(message, pytrace=False)


async def until(
    what: str,
    probe: Callable[[], Any],
    within: float,
    *,
    interval: float = 0.25,
    diagnose: Callable[[], str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    ignore: tuple[type[Exception], ...] = (),
    fail: Callable[[str], NoReturn] = fail_test,
) -> Any:
    """Poll `probe` (sync or async) until it returns something truthy, and return that.

    Args:
        what: What should happen, for the failure message.
        probe: Called once per round; a coroutine it returns is awaited.
        within: Seconds of `clock` to wait at most.
        interval: Seconds between two rounds.
        diagnose: What to add to the failure message (called only on failure).
        clock: The clock `within` counts on (`loop.time` under looptime).
        ignore: Exceptions of `probe` that count as one more unsuccessful round.
        fail: Called with the message when time is up; it must raise.

    Returns:
        The probe's first truthy value.
    """
    deadline = clock() + within
    last: Any = None
    while True:
        try:
            last = probe()
            if inspect.isawaitable(last):
                last = await last
        except ignore:
            pass
        else:
            if last:
                return last
        if clock() > deadline:
            extra = f"\n{diagnose()}" if diagnose is not None else ""
            fail(f"{what} did not happen within {within:g}s (last: {last!r}){extra}")
        await asyncio.sleep(interval)
