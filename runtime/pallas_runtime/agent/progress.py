"""Progress notifications in the formats Daedalus renders (docs/api.md §3, progress).

- tool calls: `{server}/{tool}: started` (progress 0, total null), then
  `{server}/{tool}: completed|failed` (progress 1, total 1);
- loop steps: `{agent} step N (llm|tool)` (progress N, total null);
- progress from a downstream tool or sub-agent: `{server}/{tool}: <its message>` with its numbers.

Sending is best effort: a failure is logged at debug level and never fails the call.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from pallas_runtime.downstream.source import ProgressHandler

log = logging.getLogger("pallas.progress")

Send = Callable[[float, float | None, str], Awaitable[None]]


class ProgressReporter:
    """Formats and sends one `send_message` call's progress; a no-op without a sender."""

    def __init__(self, agent: str, send: Send | None) -> None:
        self._agent = agent
        self._send = send
        self._step = 0

    @property
    def enabled(self) -> bool:
        """Whether the caller asked for progress (sent a progress token)."""
        return self._send is not None

    async def _emit(self, progress: float, total: float | None, message: str) -> None:
        if self._send is None:
            return
        try:
            await self._send(progress, total, message)
        except Exception as exc:  # noqa: BLE001 - best effort by contract: the agent loop must go on
            log.debug("progress notification not sent: %s", exc)

    async def step(self, kind: Literal["llm", "tool"]) -> None:
        """The loop moved on to its next LLM turn or tool round."""
        self._step += 1
        await self._emit(self._step, None, f"{self._agent} step {self._step} ({kind})")

    async def tool_started(self, source: str, tool: str) -> None:
        """Report that a tool call started."""
        await self._emit(0, None, f"{source}/{tool}: started")

    async def tool_finished(self, source: str, tool: str, *, ok: bool) -> None:
        """Report that a tool call completed or failed."""
        await self._emit(1, 1, f"{source}/{tool}: {'completed' if ok else 'failed'}")

    def relay(self, source: str, tool: str) -> ProgressHandler | None:
        """A handler passing a downstream call's own progress on, prefixed with where it came from."""
        if self._send is None:
            return None

        async def forward(progress: float, total: float | None, message: str | None) -> None:
            await self._emit(progress, total, f"{source}/{tool}: {message or 'progress'}")

        return forward
