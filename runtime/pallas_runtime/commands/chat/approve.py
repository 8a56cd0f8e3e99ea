"""`pallas chat` answers an agent's approval question on the terminal (docs/api.md §3, "Approvals").

A tool the agent's spec marks `requireApproval` makes the agent ask its caller, through MCP
elicitation, before the call runs. `pallas chat` declares elicitation and asks the person at the
terminal: the agent's question (which agent calls which tool, with a summary of its arguments and
why it asks), then `approve? [y/N]`; only `y` or `yes` approves. With no terminal on stdin (a
pipe, a script, a closed stdin) there is nobody to ask: the call is refused with that reason,
which the agent's model reads, and one line says so on stderr.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from fastmcp.client.elicitation import ElicitResult

from pallas_runtime.commands.chat.display import TurnDisplay
from pallas_runtime.commands.chat.stdin import read_line

PROMPT = "approve? [y/N] "
YES = frozenset({"y", "yes"})
NO_TERMINAL = "pallas chat has no terminal to ask on (stdin is not a terminal), so it refused"
REFUSED = "refused at the terminal"


def _on_terminal(stdin: TextIO) -> bool:
    try:
        return stdin.isatty()
    except (ValueError, OSError):  # closed or detached
        return False


class TerminalApprover:
    """The elicitation handler of `pallas chat`'s MCP client: approvals asked of the person."""

    def __init__(self, display: TurnDisplay, stdin: TextIO | None = None) -> None:
        self._display = display
        self._stdin = stdin

    async def __call__(
        self, message: str, response_type: Any, params: Any, context: Any
    ) -> ElicitResult[Any]:
        """Ask `message` (the agent's question) at the terminal; approve only on `y`/`yes`."""
        stdin = self._stdin if self._stdin is not None else sys.stdin
        if not _on_terminal(stdin):
            self._display.note(f"pallas chat: {message} Refused: {NO_TERMINAL}.")
            return ElicitResult(action="accept", content={"approve": False, "reason": NO_TERMINAL})
        with self._display.paused():
            self._display.note(message)
            line = await read_line(PROMPT)
        if line is not None and line.strip().lower() in YES:
            return ElicitResult(action="accept", content={"approve": True})
        return ElicitResult(action="accept", content={"approve": False, "reason": REFUSED})
