"""The `pallas chat` REPL: messages and slash commands until `/quit` or the end of input.

Answers and what a command lists go to stdout; notes, progress, tool calls and errors to stderr.
A failed message or command is reported and the session goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

from pallas_runtime.commands.chat.params import ParamsError, known_keys
from pallas_runtime.commands.chat.session import ChatError, ChatSession, Turn
from pallas_runtime.commands.chat.stdin import read_line

REPL_HELP = (
    "commands: /tools, /system, /set [KEY VALUE], /history, /save FILE, /threads, /resume ID, "
    "/delete [ID], /clear, /quit (or Ctrl-D)"
)


def write_file(name: str, text: str) -> Path:
    """Write `text` to the file `name` (`~` expanded); the path written.

    Raises:
        ChatError: the file cannot be written (the reason from the system).
    """
    path = Path(name).expanduser()
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ChatError(f"cannot write {path}: {exc.strerror}") from None
    return path


def show_turn(session: ChatSession, turn: Turn, out: TextIO) -> None:
    """The turn's tool calls (dimmed, stderr), then the answer (stdout) or the error (stderr)."""
    streamed = not turn.failed and session.display.finish_streamed(turn.text)
    session.display.tool_calls(turn.tool_calls)
    if turn.failed:
        session.display.note(f"pallas chat: the agent answered with an error: {turn.text or '(no message)'}")
    elif not streamed:
        print(turn.text, file=out, flush=True)


class Repl:
    """The commands of one REPL over a session."""

    def __init__(self, session: ChatSession, out: TextIO) -> None:
        self.session = session
        self.out = out
        self.commands: dict[str, Callable[[str], Awaitable[None]]] = {
            "/tools": self.tools,
            "/system": self.system,
            "/set": self.set,
            "/history": self.history,
            "/save": self.save,
            "/threads": self.threads,
            "/resume": self.resume,
            "/delete": self.delete,
            "/clear": self.clear,
        }

    def say(self, text: str) -> None:
        """Output of a command (stdout)."""
        print(text, file=self.out, flush=True)

    def note(self, text: str) -> None:
        """A note to the user (stderr)."""
        self.session.display.note(text)

    async def run(self) -> int:
        """Read messages and commands until `/quit` or end of input."""
        interactive = sys.stdin.isatty()
        if interactive:
            with contextlib.suppress(ImportError):
                import readline  # noqa: F401  (line editing and history for input())
            self.note(f"connected to {self.session.agent}; {REPL_HELP}")
        while True:
            line = await read_line("you> " if interactive else "")
            if line is None or line.strip() in {"/quit", "/exit"}:
                return 0
            line = line.strip()
            if line:
                await self.handle(line)

    async def handle(self, line: str) -> None:
        """One message or command."""
        name, _, argument = line.partition(" ")
        try:
            if not line.startswith("/"):
                show_turn(self.session, await self.session.send(line), self.out)
            elif (command := self.commands.get(name)) is not None:
                await command(argument.strip())
            else:
                self.note(f"unknown command {name}; {REPL_HELP}")
        except ChatError as exc:
            self.note(f"pallas chat: {exc}")

    async def tools(self, _: str) -> None:
        """The agent's MCP tools with their arguments (`?`: optional)."""
        for tool in await self.session.tools():
            schema = tool.input_schema or {}
            required = set(schema.get("required") or [])
            arguments = ", ".join(a if a in required else f"{a}?" for a in schema.get("properties") or {})
            self.say(f"{tool.name}({arguments})  {tool.description or ''}".rstrip())

    async def system(self, _: str) -> None:
        """The agent's instruction."""
        text = await self.session.instruction()
        self.say(text if text.strip() else "(this agent has no instruction)")

    async def set(self, argument: str) -> None:
        """`/set KEY VALUE` (`null` unsets); `/set` alone shows the params."""
        key, _, raw = argument.partition(" ")
        if not key:
            self.say(json.dumps(self.session.params) if self.session.params else "(no params set)")
            self.note(f"usage: /set KEY VALUE (null unsets); keys: {', '.join(known_keys())}")
            return
        if not raw.strip():
            self.note(f"usage: /set {key} VALUE (null unsets)")
            return
        try:
            self.note(await self.session.set_param(key, raw.strip()))
        except ParamsError as exc:
            self.note(f"pallas chat: /set: {exc}")

    async def history(self, _: str) -> None:
        """The conversation as the agent keeps it."""
        messages = await self.session.messages()
        self.say(
            "\n".join(f"{r}: {t}" for r, t in messages)
            if messages
            else "(no messages in this conversation yet)"
        )

    async def save(self, argument: str) -> None:
        """Write the conversation to FILE: JSON for `*.json`, else `role: text` paragraphs."""
        if not argument:
            self.note("usage: /save FILE (FILE.json for JSON)")
            return
        messages = await self.session.messages()
        if argument.endswith(".json"):
            document = {
                "agent": self.session.agent,
                "conversationId": self.session.conversation_id,
                "messages": [{"role": r, "text": t} for r, t in messages],
            }
            text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        else:
            header = f"# {self.session.agent}, conversation {self.session.conversation_id}\n\n"
            text = header + "".join(f"{r}: {t}\n\n" for r, t in messages)
        path = await asyncio.to_thread(write_file, argument, text)
        self.note(f"(saved {len(messages)} messages to {path})")

    async def threads(self, _: str) -> None:
        """Your conversations with the agent."""
        lines = await self.session.threads()
        self.say("\n".join(lines) if lines else "(no conversations yet)")

    async def resume(self, argument: str) -> None:
        """Continue an earlier conversation."""
        if not argument:
            self.note("usage: /resume ID (the ids are in /threads)")
            return
        self.session.resume(argument)
        self.note(f"(continuing conversation {argument})")

    async def delete(self, argument: str) -> None:
        """Delete a conversation (this one by default)."""
        self.note(f"(deleted conversation {await self.session.delete(argument or None)})")

    async def clear(self, _: str) -> None:
        """Start a new conversation."""
        self.session.clear()
        self.note("(new conversation)")
