"""What `pallas chat` shows on stderr while a turn runs, and the tool calls the turn made.

On a terminal (rich's judgement: a TTY, and not `TERM=dumb`) a status line, a spinner with the
agent's latest progress message, stands while the agent works and is erased before the answer
prints. Anywhere else (a pipe, a file) every progress message is a plain line `… message`,
written and flushed as it arrives, so a script reading stderr sees them in order and before the
answer reaches stdout. The turn's tool calls, with their arguments and shortened results, are
printed dimmed (plain text off a terminal) once the turn ends, as mcpctl's REPL shows them.

On a terminal the agent's text streams (docs/api.md §3, progress `{agent} text: <piece>`): its
own pieces are written to stdout as they come, where the answer goes (the spinner stops at the
first), a sub-agent's pieces dimmed on stderr after `[name]`, and each tool call's start and end
as a dimmed line when it happens. The answer is then not printed again, only its line ended.
Off a terminal a run of one writer's pieces is one line, `… <writer> text: <joined pieces>`,
written when something else arrives; the agent's final text is left to stdout, as before.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.status import Status
from rich.text import Text

TOOL_LINE_LIMIT = 300
"""Characters of a tool call's arguments or result shown on its line."""


OWN_TEXT = re.compile(r"^([a-z0-9][a-z0-9-]*) text: (.*)$", re.DOTALL)
"""A piece of the called agent's own text."""
RELAYED_TEXT = re.compile(r"^(?:[^\s:]+/[^\s:]+: )+([a-z0-9][a-z0-9-]*) text: (.*)$", re.DOTALL)
"""A piece of a sub-agent's text, relayed through one or more `peer/send_message: ` prefixes."""


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

    def __init__(self, stream: TextIO, answer: TextIO | None = None) -> None:
        # No markup, emoji or highlighting: messages and tool results are shown as they are,
        # and never wrapped (a script may parse the lines).
        self.console = Console(file=stream, markup=False, emoji=False, highlight=False, soft_wrap=True)
        self._status: Status | None = None
        self._answer = answer
        """Where the agent's streamed text goes on a terminal (stdout, with the answer)."""
        self.streamed = ""
        """The agent's own text streamed in this turn."""
        self._speaker: str | None = None
        """Who wrote the line the cursor is on: the agent (""), a sub-agent, or nobody (None)."""
        self._pending: list[str] = ["", ""]
        """Off a terminal: the text line being joined, as [its prefix, the pieces so far]."""

    @property
    def on_terminal(self) -> bool:
        """Whether the stream is a terminal that gets the status line."""
        return self.console.is_terminal

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """The status line while the block runs (on a terminal); erased when it ends."""
        self.streamed, self._speaker, self._pending = "", None, ["", ""]
        if self.on_terminal:
            self._status = self.console.status(Text("waiting for the agent…"), spinner="dots")
            self._status.start()
        try:
            yield
        finally:
            self._stop_status()
            self.console.file.flush()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The status line off while the block asks the person something, and back after."""
        status = self._status
        if status is not None:
            status.stop()
        try:
            yield
        finally:
            if status is not None and self._status is status:
                status.start()

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _end_line(self) -> None:
        """End the line a stream left open, on the stream that has it."""
        if self._speaker == "" and self._answer is not None:
            self._answer.write("\n")
            self._answer.flush()
        elif self._speaker is not None:
            self.console.print()
        self._speaker = None

    def _stream(self, speaker: str, piece: str) -> None:
        self._stop_status()
        if speaker != self._speaker:
            self._end_line()
            if speaker:
                self.console.print(Text(f"[{speaker}] ", style="dim"), end="")
        self._speaker = speaker
        if speaker or self._answer is None:
            self.console.print(Text(piece, style="dim"), end="")
            self.console.file.flush()
        else:
            self._answer.write(piece)
            self._answer.flush()
            self.streamed += piece

    def finish_streamed(self, answer: str) -> bool:
        """End the streamed answer's line; whether `answer` was streamed (then it is not printed again)."""
        prefix, text = self._pending
        if prefix and OWN_TEXT.match(prefix) and answer and text.endswith(answer):
            self._pending = [prefix, text.removesuffix(answer)]  # the answer goes to stdout
        self._flush_pending()
        streamed = bool(answer) and self.streamed.endswith(answer)
        self._end_line()
        return streamed

    def _join(self, prefix: str, piece: str) -> None:
        if self._pending[0] != prefix:
            self._flush_pending()
            self._pending[0] = prefix
        self._pending[1] += piece

    def _flush_pending(self) -> None:
        prefix, text = self._pending
        self._pending = ["", ""]
        if prefix and text.strip():
            self.console.print(Text(f"… {prefix}{text}"))
            self.console.file.flush()

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """A fastmcp progress handler: update the status line, or write one line."""
        text = progress_text(progress, total, message)
        piece = OWN_TEXT.match(text) or RELAYED_TEXT.match(text)
        if piece is not None:
            if self.on_terminal:
                self._stream("" if piece.re is OWN_TEXT else piece[1], piece[2])
            else:
                self._join(text[: piece.start(2)], piece[2])
            return
        self._flush_pending()
        if self._status is not None:
            self._status.update(Text(text))
        elif self.on_terminal:  # streaming began: the rest as dimmed lines (tool calls as they go)
            self._end_line()
            self.console.print(Text(text, style="dim"))
            self.console.file.flush()
        else:
            self.note(f"… {text}")

    def tool_calls(self, calls: Sequence[Mapping[str, Any]]) -> None:
        """The turn's tool calls, dimmed."""
        for line in tool_lines(calls):
            self.console.print(Text(line, style="dim"))
        self.console.file.flush()

    def note(self, text: str) -> None:
        """One plain line (a message to the user), flushed."""
        self._flush_pending()
        self._end_line()
        self.console.print(Text(text))
        self.console.file.flush()
