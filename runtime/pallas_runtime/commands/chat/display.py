"""What `pallas chat` shows on stderr while a turn runs, and the tool calls the turn made.

On a terminal (rich's judgement: a TTY, and not `TERM=dumb`) a status line, a spinner with the
agent's latest progress message, stands while the agent works and is erased before the answer
prints. Anywhere else (a pipe, a file) every progress message is a plain line `… message`,
written and flushed as it arrives, so a script reading stderr sees them in order and before the
answer reaches stdout. The turn's tool calls, with their arguments and shortened results, are
printed dimmed (plain text off a terminal) once the turn ends, as mcpctl's REPL shows them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.status import Status
from rich.text import Text

TOOL_LINE_LIMIT = 300
"""Characters of a tool call's arguments or result shown on its line."""


def progress_text(progress: float, total: float | None, message: str | None) -> str:
    """What one progress notification says: its message, else its numbers."""
    return message or f"{progress:g}" + (f"/{total:g}" if total else "")


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= TOOL_LINE_LIMIT else f"{flat[:TOOL_LINE_LIMIT]}…"


def tool_lines(calls: Sequence[Mapping[str, Any]]) -> list[str]:
    """`[tool NAME ARGUMENTS]` and `[result NAME ok|error: TEXT]` for every call, in order."""
    lines = []
    for call in calls:
        name = str(call.get("name", "?"))
        if "argumentsError" in call:
            arguments = f"(bad arguments: {call['argumentsError']})"
        else:
            arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False)
        lines.append(f"[tool {name} {_one_line(arguments)}]")
        if "isError" in call:
            outcome = "error" if call["isError"] else "ok"
            lines.append(f"[result {name} {outcome}: {_one_line(str(call.get('result', '')))}]")
    return lines


class TurnDisplay:
    """Progress while a turn runs and its tool calls after, on one stream (stderr)."""

    def __init__(self, stream: TextIO) -> None:
        # No markup, emoji or highlighting: messages and tool results are shown as they are,
        # and never wrapped (a script may parse the lines).
        self.console = Console(file=stream, markup=False, emoji=False, highlight=False, soft_wrap=True)
        self._status: Status | None = None

    @property
    def on_terminal(self) -> bool:
        """Whether the stream is a terminal that gets the status line."""
        return self.console.is_terminal

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """The status line while the block runs (on a terminal); erased when it ends."""
        if self.on_terminal:
            self._status = self.console.status(Text("waiting for the agent…"), spinner="dots")
            self._status.start()
        try:
            yield
        finally:
            if self._status is not None:
                self._status.stop()
                self._status = None
            self.console.file.flush()

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """A fastmcp progress handler: update the status line, or write one line."""
        text = progress_text(progress, total, message)
        if self._status is not None:
            self._status.update(Text(text))
        else:
            self.note(f"… {text}")

    def tool_calls(self, calls: Sequence[Mapping[str, Any]]) -> None:
        """The turn's tool calls, dimmed."""
        for line in tool_lines(calls):
            self.console.print(Text(line, style="dim"))
        self.console.file.flush()

    def note(self, text: str) -> None:
        """One plain line (a message to the user), flushed."""
        self.console.print(Text(text))
        self.console.file.flush()
