"""A program on a pseudo-terminal, and the screen a person would see.

`pexpect` runs the program on a pty (so it sees a terminal on stdin, stdout and stderr) and
`pyte` replays everything it wrote into a screen of `rows` x `columns` cells, control sequences
and all, so a test can assert what is on screen now (a status line drawn and erased leaves no
trace on the screen, though its text is in the byte stream).

pexpect blocks while it waits, so the waits run on a worker thread: the agent and the fake LLM
under test often serve from the test's own event loop.

    async with terminal([*pallas_argv(), "chat", url]) as term:
        await term.expect("you> ")
        term.sendline("hello")
        await term.expect("Hello there.")
        assert "Hello there." in term.screen()
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence

import pexpect
import pyte

ROWS, COLUMNS = 30, 120
TERMINAL_OVERRIDES = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES")
"""Variables with which rich overrides what it detects (a pipe taken for a terminal, its size)."""


def detected_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without `TERMINAL_OVERRIDES`, plus `extra`: a program sees what it runs on."""
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_OVERRIDES}
    return {**env, **(extra or {})}


class Terminal:
    """A program running on a pseudo-terminal."""

    def __init__(self, child: pexpect.spawn, rows: int, columns: int) -> None:
        self.child = child
        self._screen = pyte.Screen(columns, rows)
        self._stream = pyte.ByteStream(self._screen)
        self.raw = b""
        """Every byte the program wrote so far (what `expect` has read)."""

    async def expect(self, pattern: str, limit: float = 30) -> str:
        """Wait for `pattern` (a regular expression) in the output; the text before it and it."""
        await asyncio.to_thread(self.child.expect, pattern, timeout=limit)
        seen = bytes(self.child.before or b"") + bytes(self.child.after or b"")
        return seen.decode(errors="replace")

    def feed(self, data: bytes) -> None:
        self.raw += data
        self._stream.feed(data)

    def sendline(self, line: str) -> None:
        """Type `line` and Enter."""
        self.child.sendline(line)

    def screen(self) -> list[str]:
        """The screen's lines now, trailing blanks removed."""
        return [line.rstrip() for line in self._screen.display]


class _Tee:
    """pexpect's `logfile_read`: every byte read goes to the terminal emulator too."""

    def __init__(self, terminal: Terminal | None = None) -> None:
        self.terminal = terminal

    def write(self, data: bytes) -> None:
        if self.terminal is not None:
            self.terminal.feed(data)

    def flush(self) -> None:
        pass


@contextlib.asynccontextmanager
async def terminal(
    argv: Sequence[str], env: Mapping[str, str] | None = None, rows: int = ROWS, columns: int = COLUMNS
) -> AsyncIterator[Terminal]:
    """Run `argv` on a pseudo-terminal of `rows` x `columns`; kill it at the end if still running."""
    tee = _Tee()
    child = await asyncio.to_thread(
        pexpect.spawn,
        argv[0],
        list(argv[1:]),
        env=detected_env({"TERM": "xterm-256color", **(env or {})}),
        dimensions=(rows, columns),
        logfile=None,
    )
    term = Terminal(child, rows, columns)
    tee.terminal = term
    child.logfile_read = tee
    try:
        yield term
    finally:
        if child.isalive():
            child.terminate(force=True)
        child.close()
