"""Lines from `pallas chat`'s stdin without blocking the event loop (the REPL's and approvals')."""

from __future__ import annotations

import asyncio
import contextlib
import threading


async def read_line(prompt: str) -> str | None:
    """One line of stdin without blocking the event loop; None at end of input.

    `input()` runs on a daemon thread so that Ctrl-C (which cancels the waiting task) never
    leaves the interpreter waiting for the thread at exit.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str | None] = loop.create_future()

    def deliver(line: str | None) -> None:
        if not future.done():
            future.set_result(line)

    def work() -> None:
        try:
            line: str | None = input(prompt)
        except (EOFError, OSError, ValueError):
            line = None
        with contextlib.suppress(RuntimeError):  # the loop may already be closed
            loop.call_soon_threadsafe(deliver, line)

    threading.Thread(target=work, name="pallas-chat-stdin", daemon=True).start()
    return await future
