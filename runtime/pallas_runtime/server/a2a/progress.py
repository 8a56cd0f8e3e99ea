"""A turn's progress as A2A events: steps and tool calls as status updates, text as an artifact.

The same notifications MCP's `send_message` sends (`agent.progress`) are translated here:

- the agent's own text as the model writes it goes out as chunks of the artifact `answer`
  (the first chunk opens it, the next ones append), and at the end the whole answer replaces
  it (`append: false`, `lastChunk: true`): a streaming client sees the text as written, and the
  task keeps the answer alone, not the text of every step;
- everything else (`{agent} step N (llm|tool)`, `{server}/{tool}: started|completed|failed`, a
  peer's relayed progress) is a `working` status update whose message is the progress line, its
  numbers in the message's metadata under `pallas.dev/progress`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from a2a.helpers import new_text_message, new_text_part
from a2a.server.tasks import TaskUpdater
from a2a.types import Role, TaskState

from pallas_runtime.agent.progress import TEXT_MARK

ANSWER_ARTIFACT = "answer"
"""The artifact a turn's answer is written to (and streamed into)."""
PROGRESS_META = "pallas.dev/progress"


class A2AProgress:
    """The `Send` of one turn's `ProgressReporter`, writing A2A events through a `TaskUpdater`."""

    def __init__(self, agent: str, updater: TaskUpdater) -> None:
        self._own_text = f"{agent}{TEXT_MARK}"
        self._updater = updater
        self._answer_open = False

    async def __call__(
        self, progress: float, total: float | None, message: str, /, *, meta: Mapping[str, Any] | None = None
    ) -> None:
        """Send one progress notification as its A2A event (a typed chunk in its metadata too)."""
        if message.startswith(self._own_text):
            piece = message[len(self._own_text) :]
            await self._updater.add_artifact(
                [new_text_part(piece)], artifact_id=ANSWER_ARTIFACT, name=ANSWER_ARTIFACT,
                append=self._answer_open,
            )  # fmt: skip
            self._answer_open = True
            return
        status = new_text_message(
            message, context_id=self._updater.context_id, task_id=self._updater.task_id, role=Role.ROLE_AGENT
        )
        status.metadata.update({PROGRESS_META: {"progress": progress, "total": total}, **(meta or {})})
        await self._updater.update_status(TaskState.TASK_STATE_WORKING, message=status)

    async def answer(self, text: str) -> None:
        """The whole answer, replacing what was streamed into the artifact."""
        await self._updater.add_artifact(
            [new_text_part(text)], artifact_id=ANSWER_ARTIFACT, name=ANSWER_ARTIFACT,
            append=False, last_chunk=True,
        )  # fmt: skip
