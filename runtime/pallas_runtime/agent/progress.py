"""Progress notifications in the formats Daedalus renders (docs/api.md §3, progress).

- tool calls: `{server}/{tool}: started`, then `{server}/{tool}: completed|failed`;
- loop steps: `{agent} step N (llm|tool)`;
- a workflow's stages (`spec.workflow`): `chain a → b: step 2/2 b…`, `parallel: 2 of 3 answered`;
- progress from a downstream tool or sub-agent: `{server}/{tool}: <its message>`;
- the model's text as it is written: `{agent} text: <piece>`,
  the pieces in order and exact, so a client that joins them has the text so far. A sub-agent's
  arrive relayed like any progress, `{peer}/send_message: {peer} text: <piece>`: attributed.
  Pieces of a fast stream are joined until `TEXT_INTERVAL` has passed since the last one sent.

A request that asks for typed chunks (`_meta["pallas.dev/chunks"]: true`) gets its tool calls as
they happen, under the notification's `_meta["pallas.dev/chunk"]` (for clients
that want structure rather than lines): on a tool's `started` line `{"type": "toolCall", "id",
"name", "arguments"}`, on its `completed|failed` line `{"type": "toolResult", "id", "name",
"isError", "result"}` (the result as the model got it, cut like the result's trace), and, last,
`{agent} turn N done` with `{"type": "final", "conversationId", "turnIndex"}` (the turn's index in
its conversation from 0; null and 0 for a turn kept nowhere).

The numbers are one counter per call, 1, 2, 3, … with `total` null: MCP requires a token's
progress to increase with every notification (and seed D's field table calls it a monotonically
increasing counter), so a client that enforces that drops none. What a notification is about is
in its message, in the formats above (the step number N among them).

Sending is best effort: a failure is logged at debug level and never fails the call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pallas_api.names import CHUNK_META
from pallas_runtime.downstream.source import ProgressHandler

log = logging.getLogger("pallas.progress")


class Send(Protocol):
    """Where one call's progress notifications go: its number, total, line and `_meta` (if any)."""

    async def __call__(
        self, progress: float, total: float | None, message: str, /, *, meta: Mapping[str, Any] | None = None
    ) -> None:
        """Send one notification (best effort: `ProgressReporter` logs a failure)."""


TEXT_MARK = " text: "
"""What separates the writing agent's name from a piece of its text in a progress message."""
TEXT_PIECE_MAX = 16384
"""Characters of text in one notification at most: MCP clients bound one SSE event (the SDK's to
1 MiB), and a relayed piece must fit through every agent of a delegation."""
TEXT_INTERVAL = 0.05
"""Seconds between two text notifications of one stream at most: 20 a second, whatever the
model's token rate, and the first piece goes out at once."""


class ProgressReporter:
    """Formats and sends one `send_message` call's progress; a no-op without a sender."""

    def __init__(self, agent: str, send: Send | None, *, chunks: bool = False) -> None:
        self._agent = agent
        self._send = send
        self._chunks = chunks
        """Whether the caller asked for typed chunks (`CHUNK_META`) on the lines that have one."""
        self._step = 0
        self._sent = 0

    @property
    def enabled(self) -> bool:
        """Whether the caller asked for progress (sent a progress token)."""
        return self._send is not None

    async def _emit(self, message: str, chunk: Mapping[str, Any] | None = None) -> None:
        if self._send is None:
            return
        self._sent += 1  # counted before sending: concurrent tool calls never share a number
        try:
            if chunk is not None and self._chunks:
                await self._send(self._sent, None, message, meta={CHUNK_META: chunk})
            else:
                await self._send(self._sent, None, message)
        except Exception as exc:  # noqa: BLE001 - best effort by contract: the agent loop must go on
            log.debug("progress notification not sent: %s", exc)

    async def step(self, kind: Literal["llm", "tool"]) -> None:
        """The loop moved on to its next LLM turn or tool round."""
        self._step += 1
        await self._emit(f"{self._agent} step {self._step} ({kind})")

    async def note(self, message: str) -> None:
        """Something the caller should know while the turn goes on (a budget nearly spent)."""
        await self._emit(f"{self._agent} {message}")

    async def workflow(self, message: str) -> None:
        """Where a workflow is: the stage it reached, named in the message."""
        await self._emit(message)

    async def tool_started(self, source: str, tool: str, call: ToolCallChunk | None = None) -> None:
        """Report that a tool call started (with its arguments, for a caller that asked for chunks)."""
        chunk = None if call is None else {"type": "toolCall", **call.named(), "arguments": call.arguments}
        await self._emit(f"{source}/{tool}: started", chunk)

    async def awaiting_approval(self, source: str, tool: str) -> None:
        """Report that a tool call waits for the caller's approval (`agent.approvals`)."""
        await self._emit(f"{source}/{tool}: awaiting approval")

    async def tool_finished(
        self, source: str, tool: str, *, ok: bool, call: ToolCallChunk | None = None, result: str = ""
    ) -> None:
        """Report that a tool call completed or failed (and its result, for a caller asking for chunks)."""
        chunk = (
            None
            if call is None
            else {"type": "toolResult", **call.named(), "isError": not ok, "result": result}
        )
        await self._emit(f"{source}/{tool}: {'completed' if ok else 'failed'}", chunk)

    async def finished(self, conversation_id: str | None, turn_index: int) -> None:
        """The turn is done: a last line with its place in its thread (for a caller asking for chunks)."""
        if self._chunks:
            chunk = {"type": "final", "conversationId": conversation_id, "turnIndex": turn_index}
            await self._emit(f"{self._agent} turn {turn_index} done", chunk)

    async def text(self, piece: str) -> None:
        """Send a piece of the model's text, in notifications of at most TEXT_PIECE_MAX characters."""
        for start in range(0, len(piece), TEXT_PIECE_MAX):
            await self._emit(f"{self._agent}{TEXT_MARK}{piece[start : start + TEXT_PIECE_MAX]}")

    def text_stream(self) -> TextStream | None:
        """Where one LLM call's streamed text goes; None when the caller follows no progress."""
        return TextStream(self) if self._send is not None else None

    def relay(self, source: str, tool: str) -> ProgressHandler | None:
        """A handler passing a downstream call's own progress on, prefixed with where it came from."""
        if self._send is None:
            return None

        async def forward(progress: float, total: float | None, message: str | None) -> None:
            # Its own numbers restart with every call it makes: the message carries what it said.
            await self._emit(f"{source}/{tool}: {message or 'progress'}")

        return forward


@dataclass(frozen=True, slots=True)
class ToolCallChunk:
    """Which call a tool chunk is about: the model's call id and name, and its arguments."""

    id: str | None
    name: str
    arguments: Mapping[str, Any]

    def named(self) -> dict[str, Any]:
        """The fields every chunk about this call carries."""
        return {"id": self.id, "name": self.name}


class TextStream:
    """One LLM call's text on its way to the caller, pieces joined to at most one send per interval."""

    def __init__(self, reporter: ProgressReporter) -> None:
        self._reporter = reporter
        self._pending: list[str] = []
        self._last_sent = float("-inf")
        self.received = False
        """Whether any text came through (the provider streamed)."""

    async def feed(self, piece: str) -> None:
        """Take the next piece of text; send what is pending when the interval has passed."""
        self.received = True
        self._pending.append(piece)
        if time.monotonic() - self._last_sent >= TEXT_INTERVAL:
            await self.flush()

    async def flush(self) -> None:
        """Send what is pending (at the end of the call)."""
        if self._pending:
            text = "".join(self._pending)
            self._pending.clear()
            self._last_sent = time.monotonic()
            await self._reporter.text(text)
