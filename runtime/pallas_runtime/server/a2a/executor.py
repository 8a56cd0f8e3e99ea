"""The A2A `AgentExecutor` of an agent: an A2A message is one turn, through `TurnEntry`.

- the message's text parts (data parts as JSON) are the user message; image parts (raw bytes
  with an image media type) its images; a part by URL is refused: the agent fetches nothing a
  caller names;
- the task's `contextId` is the conversation id under the caller (the SDK makes one up when
  the message names none: a new conversation, which the answer's `contextId` continues);
- the call path of agent-to-agent calls travels in the request's (or the message's) metadata
  under the MCP `_meta` keys (`pallas.dev/callPath`, `pallas.dev/hops`), a call's `params`
  under `pallas.dev/params`;
- the turn's progress goes out only on `SendStreamingMessage` (as `send_message` reports progress
  only to a caller that sent a progress token): a blocking send's task holds the answer alone;
- a refusal before the model is asked ends the task `rejected`, a failure `failed`; both with
  the error text as the status message and `{"code", "message"}` under `pallas.dev/error` in the
  task's metadata, the codes of `send_message` (docs/api.md §3 "Errors").
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from a2a.helpers import new_task_from_user_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, Role, TaskState
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError

from pallas_api.config import SendParams
from pallas_api.errors import ErrorCode, error_content
from pallas_api.names import CONVERSATION_META, HISTORY_TRIMMED_META
from pallas_api.validation import describe
from pallas_runtime.agent.inputs import ImageInput
from pallas_runtime.downstream.call_path import CALL_PATH_META, HOPS_META
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server.a2a.inbound import inbound_of, streams
from pallas_runtime.server.a2a.progress import A2AProgress
from pallas_runtime.server.turn_entry import TurnEntry, TurnFailed, TurnRequest, TurnTimer
from pallas_runtime.spending.chain import BUDGET_META, spend_meta

CARRIED_META = (CALL_PATH_META, HOPS_META, BUDGET_META)
"""What a delegating agent's request carries down the chain, as over MCP `_meta`: the path of
agents and what the root caller has left to spend (the answer says what the turn spent)."""
PARAMS_META = "pallas.dev/params"
ERROR_META = "pallas.dev/error"
REFUSALS = frozenset({ErrorCode.INVALID_ARGUMENTS, ErrorCode.LOOP_DETECTED, ErrorCode.MAX_DEPTH})
"""Codes of a request refused before its turn started: the task is `rejected`, not `failed`."""
VIA = "A2A SendMessage"


class BadMessage(ValueError):
    """An A2A message the turn cannot take; the text says what is wrong with it."""


def _metadata(context: RequestContext) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    message = context.message
    if message is not None and message.metadata:
        merged.update(MessageToDict(message.metadata))
    merged.update(context.metadata)  # the request's own metadata wins over the message's
    hops = merged.get(HOPS_META)
    if isinstance(hops, float) and hops.is_integer():  # JSON numbers arrive as floats in a Struct
        merged[HOPS_META] = int(hops)
    return merged


def message_inputs(message: Message | None) -> tuple[str, list[ImageInput]]:
    """The text and the images of an A2A message.

    Raises:
        BadMessage: a part the agent cannot take (by URL, or a file that is not an image).
    """
    texts: list[str] = []
    images: list[ImageInput] = []
    for index, part in enumerate(message.parts if message is not None else ()):
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
        elif kind == "raw" and part.media_type.startswith("image/"):
            images.append(ImageInput(data=base64.b64encode(part.raw).decode(), mime_type=part.media_type))
        elif kind == "url":
            raise BadMessage(
                f"message part {index} is a URL: the agent fetches nothing by URL; send it as raw"
            )
        else:
            raise BadMessage(
                f"message part {index} ({part.media_type or kind}) is neither text, data nor an image"
            )
    return "\n".join(texts), images


def call_params(metadata: Mapping[str, Any]) -> SendParams | None:
    """The turn's `params` from the request metadata, if it sets any (as `send_message`'s).

    Raises:
        BadMessage: they are not valid `SendParams`.
    """
    raw = metadata.get(PARAMS_META)
    if raw is None:
        return None
    try:
        return SendParams.model_validate(raw)
    except ValidationError as exc:
        raise BadMessage(f"metadata {PARAMS_META}: {describe(exc, limit=5)}") from None


class TurnExecutor(AgentExecutor):
    """Runs an A2A message as one turn of the agent and reports it as the task's events."""

    def __init__(self, agent: str, entry: TurnEntry, metrics: RuntimeMetrics) -> None:
        self._agent = agent
        self._entry = entry
        self._metrics = metrics

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """One turn: submitted, working (with progress), then completed, rejected or failed."""
        timer = TurnTimer(self._agent, self._metrics)
        ok = False
        try:
            ok = await self._execute(context, event_queue)
        finally:
            timer.done(ok=ok)

    async def _execute(self, context: RequestContext, event_queue: EventQueue) -> bool:
        task = context.current_task
        if task is None and context.message is not None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        inbound = inbound_of(context.call_context)
        metadata = _metadata(context)
        try:
            text, images = message_inputs(context.message)
            params = call_params(metadata)
        except BadMessage as exc:
            await self._ended(updater, self._entry.failed(exc, ErrorCode.INVALID_ARGUMENTS, via=VIA))
            return False
        progress = A2AProgress(self._agent, updater)
        await updater.start_work()
        request = TurnRequest(
            caller=inbound.caller,
            message=text,
            call_meta={k: metadata[k] for k in CARRIED_META if k in metadata},
            images=images or None,
            conversation_id=context_id,
            inbound_auth=inbound.credential,
            params=params,
            # As send_message reports progress only to a caller that sent a progress token.
            progress=progress if streams(context.call_context) else None,
        )
        try:
            reply = await self._entry.run(request, via=VIA)
        except TurnFailed as exc:
            await self._ended(updater, exc)
            return False
        await progress.answer(reply.text)
        done: dict[str, Any] = {}
        if reply.conversation_id is not None:
            done[CONVERSATION_META] = reply.conversation_id
        if reply.history_left_out:
            done[HISTORY_TRIMMED_META] = {"droppedMessages": reply.history_left_out}
        if reply.spent is not None:
            done.update(spend_meta(*reply.spent))
        await updater.update_status(TaskState.TASK_STATE_COMPLETED, metadata=done or None)
        return True

    async def _ended(self, updater: TaskUpdater, failure: TurnFailed) -> None:
        state = TaskState.TASK_STATE_REJECTED if failure.code in REFUSALS else TaskState.TASK_STATE_FAILED
        message = new_text_message(
            str(failure), context_id=updater.context_id, task_id=updater.task_id, role=Role.ROLE_AGENT
        )
        error = error_content(failure.code, str(failure), processed=failure.processed)["error"]
        spent = spend_meta(*failure.spent) if failure.spent else {}
        await updater.update_status(state, message=message, metadata={ERROR_META: error, **spent})

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task canceled; the SDK then cancels the turn, which stores nothing."""
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()
