"""Held turns: a `send_message` turn that runs apart from the request that started it.

Two protocol features of MCP 2026-07-28 need a turn that outlives one request:

- a **task** (`io.modelcontextprotocol/tasks`, SEP-2663): the call returns a task handle at once,
  the turn runs on, and the client polls `tasks/get` — on any connection, after a dropped one;
- an **approval over MRTR** (SEP-2322): the sessionless protocol has no request from server to
  client, so a question becomes the call's `input_required` result and the client's retry,
  carrying the answer, picks up the *same* turn where it waits (held, not re-run).

Both are one mechanism here: `HeldTurns.start` runs the tool body as an asyncio task with a
`Channel` (where its progress and its approval questions go, read by `send_message` instead of
the request's back channel) and a `TaskRecord` in the task store (`conversations.tasks`). A
question sets the record `input_required` with the elicitation as its input request and waits
for `answer` (from `tasks/update`, or an MRTR retry); a finished turn stores its result.

With a database store every replica reads the records; a cancel or an answer that reaches
another replica is written to the record and the running replica picks it up within
`WATCH_SECONDS`. With the memory store the records are the pod's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import mcp_types
from fastmcp.exceptions import FastMCPError
from fastmcp.tools import ToolResult
from mcp_types import CallToolResult

from pallas_runtime.agent.progress import Send
from pallas_runtime.approval.elicit import RELAY_META
from pallas_runtime.approval.question import Approver
from pallas_runtime.conversations.model import StoreUnavailable
from pallas_runtime.conversations.tasks import TaskRecord, TaskStore, expiry, now
from pallas_runtime.server.tool_errors import CodedToolError, error_result
from pallas_runtime.task_wire import TASK_LOST

log = logging.getLogger("pallas.tasks")

WATCH_SECONDS = 1.0
"""How often a replica reads the records of its running held turns (a cancel or an answer
written by another replica)."""
POLL_INTERVAL_MS = 1000
"""The `pollIntervalMs` a task advertises."""
HEARTBEAT_SECONDS = 5.0
"""How often a replica marks the records of its running tasks as alive (their `updated_at`)."""
LOST_AFTER_SECONDS = 20.0
"""A running task not marked alive for this long is reported failed (`TASK_LOST`): its process
went away mid-turn, and nothing else would ever end it."""
MAX_RECENT = 1000
"""Finished MRTR turns a process remembers at most, for their late retries (oldest go first)."""
PROGRESS_EVERY = 0.5
"""A task's progress message is written at most this often (the last one always)."""


@dataclass(frozen=True, slots=True)
class Channel:
    """Where a held turn's progress and approval questions go instead of the request's channel."""

    progress: Send
    approver: Approver
    chunks: bool


_CHANNEL: contextvars.ContextVar[Channel | None] = contextvars.ContextVar("pallas_held_channel", default=None)


def held_channel() -> Channel | None:
    """The channel of the held turn being run here; None in an ordinary request."""
    return _CHANNEL.get()


class TaskNotFound(Exception):
    """No such task for this caller (never started, someone else's, or expired)."""


@dataclass
class _Running:
    """One held turn running in this process."""

    record: TaskRecord
    persist: bool = True
    job: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set (and replaced) whenever its status changes: a waiting MRTR leg wakes."""
    answer: asyncio.Future[dict[str, Any]] | None = None
    """Set while a question waits: the answers (`inputResponses`) resolve it."""
    leg_progress: Send | None = None
    """The progress sender of the MRTR leg waiting on it now, if any."""
    leg_approver: Approver | None = None
    """The approver of the request that started it while that request waits (a resumable turn):
    questions go there first, to the task once the request is gone."""
    last_progress: float = 0.0

    def bump(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


Body = Callable[[], Awaitable[ToolResult]]
"""The tool body, run with the held turn's `Channel`."""


class HeldTurns:
    """The held turns of one agent: started here, kept in the task store, answered and cancelled."""

    def __init__(self, agent: str, store: TaskStore, *, ttl_seconds: float) -> None:
        self._agent = agent
        self._store = store
        self.ttl_seconds = ttl_seconds
        self._running: dict[str, _Running] = {}
        self._recent: OrderedDict[str, TaskRecord] = OrderedDict()
        """Finished turns never kept in the store (MRTR), for a retry that comes after the end."""
        self._watcher: asyncio.Task[None] | None = None

    async def start(
        self,
        owner: str,
        body: Body,
        *,
        relay: str | None,
        chunks: bool,
        persist: bool = True,
        approver: Approver | None = None,
    ) -> TaskRecord:
        """Run `body` as a held turn of `owner`; its record (status `working`) once kept.

        `relay` is the request's approval relay token (a calling agent's), sent back with the
        turn's questions like `approval.elicit.CallerApprover` does. Without `persist` (an MRTR
        turn, whose retry comes back to this process) the record is this process's alone.

        Raises:
            StoreUnavailable: the task could not be kept.
        """
        moment = now()
        record = TaskRecord(self._agent, owner, secrets.token_urlsafe(18), "working", moment, moment)
        if persist:
            await self._store.create(record)
        running = _Running(record, persist=persist, leg_approver=approver)
        self._running[record.id] = running
        channel = Channel(_ProgressToTask(self, running), _TaskApprover(self, running, relay), chunks)
        context = contextvars.copy_context()
        context.run(_CHANNEL.set, channel)
        running.job = asyncio.create_task(self._run(running, body), context=context, name=f"task {record.id}")
        self._ensure_watcher()
        return record

    async def get(self, owner: str, task_id: str) -> TaskRecord:
        """The task as it stands.

        Raises:
            TaskNotFound: no such task of `owner`.
            StoreUnavailable: the store cannot be read.
        """
        running = self._running.get(task_id)
        record = running.record if running is not None else self._recent.get(task_id)
        if record is not None and record.expires_at is not None and record.expires_at <= now():
            record = None
        if record is None and running is None and task_id not in self._recent:
            record = await self._store.get(self._agent, task_id)
            if record is not None and _lost(record):
                record = replace(
                    record, status="failed", error=LOST_ERROR, expires_at=expiry(self.ttl_seconds)
                )
                fields = {"status": "failed", "error": LOST_ERROR, "expires_at": record.expires_at}
                await self._store.change(self._agent, task_id, **fields)
        if record is None or record.owner != owner:
            raise TaskNotFound(task_id)
        return record

    async def cancel(self, owner: str, task_id: str) -> TaskRecord:
        """Cancel the task's turn (here, or through the record on the replica that runs it).

        A finished task stays as it ended.

        Raises:
            TaskNotFound: no such task of `owner`.
        """
        record = await self.get(owner, task_id)
        if record.finished:
            return record
        running = self._running.get(task_id)
        if running is not None and running.job is not None:
            running.job.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running.job
            return running.record
        await self._store.change(self._agent, task_id, cancel_requested=True)
        return record

    async def answer(self, owner: str, task_id: str, responses: Mapping[str, Any]) -> None:
        """Deliver the answers to the task's question (`tasks/update`, an MRTR retry).

        Raises:
            TaskNotFound: no such task of `owner`.
        """
        record = await self.get(owner, task_id)
        running = self._running.get(task_id)
        if running is not None:
            if running.answer is not None and not running.answer.done():
                running.answer.set_result(dict(responses))
                # Working again from now: a wait that starts before the turn takes the answer must
                # not read the question as still open.
                running.record = replace(running.record, status="working", input_requests=None)
            return
        if not record.finished:
            await self._store.change(self._agent, task_id, input_responses=dict(responses))

    async def settled(
        self, owner: str, task_id: str, progress: Send | None, *, keep: bool = False
    ) -> TaskRecord:
        """Wait until the task finishes or asks a question; the record then.

        `progress` gets the turn's progress meanwhile (an MRTR leg's client). Cancelling this
        wait cancels a turn that is working, and leaves one waiting for an answer held; with
        `keep` (a resumable turn) the turn goes on either way, followed by `tasks/get`.

        Raises:
            TaskNotFound: no such task of `owner` running in this process.
        """
        running = self._running.get(task_id)
        if running is None or running.record.owner != owner:
            record = await self.get(owner, task_id)
            if record.finished:
                return record
            raise TaskNotFound(task_id)
        running.leg_progress = progress
        try:
            while not running.record.finished and (keep or running.record.status != "input_required"):
                await running.changed.wait()
            return running.record
        except asyncio.CancelledError:
            if not keep and running.job is not None and running.record.status == "working":
                running.job.cancel()
            raise
        finally:
            running.leg_progress = None
            running.leg_approver = None

    async def aclose(self) -> None:
        """Cancel every held turn of this process (the server stops)."""
        jobs = [r.job for r in self._running.values() if r.job is not None]
        if self._watcher is not None:
            jobs.append(self._watcher)
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)

    async def _set(self, running: _Running, **fields: Any) -> None:
        """Change the task here and in the store (a store failure is logged: the turn goes on)."""
        running.record = replace(running.record, updated_at=now(), **fields)
        running.bump()
        if not running.persist:
            return
        try:
            await self._store.change(self._agent, running.record.id, **fields)
        except StoreUnavailable as exc:
            log.warning("task %s: its record was not updated: %s", running.record.id, exc)

    async def _run(self, running: _Running, body: Body) -> None:
        try:
            outcome = await body()
        except asyncio.CancelledError:
            await asyncio.shield(self._end(running, "cancelled", status_message="cancelled"))
            raise
        except CodedToolError as exc:  # what `CodedErrors` answers an ordinary call with
            result = error_result(exc.code, str(exc), exc.meta, processed=exc.processed)
            await self._end(
                running, "completed", result=_wire(_call_tool_result(result)), status_message=str(exc)
            )
        except FastMCPError as exc:  # bad arguments and other tool errors, as fastmcp answers them
            wire = _wire(_call_tool_result(ToolResult(content=str(exc), is_error=True)))
            await self._end(running, "completed", result=wire, status_message=str(exc))
        except Exception as exc:
            # Details stay in the log, as `mask_error_details` keeps them from an ordinary call.
            log.exception("task %s failed", running.record.id)
            error = {"code": mcp_types.INTERNAL_ERROR, "message": f"the turn failed: {type(exc).__name__}"}
            await self._end(running, "failed", error=error, status_message=error["message"])
        else:
            await self._end(running, "completed", result=_wire(_call_tool_result(outcome)))

    async def _end(self, running: _Running, status: str, **fields: Any) -> None:
        try:
            await self._set(
                running, status=status, input_requests=None, expires_at=expiry(self.ttl_seconds), **fields
            )
        finally:
            self._running.pop(running.record.id, None)
            if not running.persist:
                self._recent[running.record.id] = running.record
                while len(self._recent) > MAX_RECENT:
                    self._recent.popitem(last=False)

    def _ensure_watcher(self) -> None:
        if self._store.shared and (self._watcher is None or self._watcher.done()):
            self._watcher = asyncio.create_task(self._watch(), name="held turns watcher")

    async def _watch(self) -> None:
        """Pick up cancels and answers another replica wrote to the records of our turns.

        Every `HEARTBEAT_SECONDS` it also marks them alive, so that a reader tells a running
        turn from one whose process died (`LOST_AFTER_SECONDS`).
        """
        beat = time.monotonic()
        while self._running:
            await asyncio.sleep(WATCH_SECONDS)
            alive = time.monotonic() - beat >= HEARTBEAT_SECONDS
            if alive:
                beat = time.monotonic()
            for task_id, running in list(self._running.items()):
                if alive and running.persist:
                    with contextlib.suppress(StoreUnavailable):
                        await self._store.change(self._agent, task_id)
                try:
                    record = await self._store.get(self._agent, task_id)
                except StoreUnavailable:
                    continue
                if record is None:
                    continue
                if record.cancel_requested and running.job is not None:
                    running.job.cancel()
                elif record.input_responses and running.answer is not None and not running.answer.done():
                    running.answer.set_result(record.input_responses)


class _ProgressToTask:
    """A held turn's progress: the task's status message, and the waiting MRTR leg's client."""

    def __init__(self, turns: HeldTurns, running: _Running) -> None:
        self._turns = turns
        self._running = running

    async def __call__(
        self, progress: float, total: float | None, message: str, /, *, meta: Mapping[str, Any] | None = None
    ) -> None:
        running = self._running
        if running.leg_progress is not None:
            await running.leg_progress(progress, total, message, meta=meta)
        moment = time.monotonic()
        if message and moment - running.last_progress >= PROGRESS_EVERY:
            running.last_progress = moment
            await self._turns._set(running, status_message=message)


class _TaskApprover:
    """Asks through the task: `input_required` with the elicitation, until the answer comes."""

    def __init__(self, turns: HeldTurns, running: _Running, relay: str | None) -> None:
        self._turns = turns
        self._running = running
        self._relay = relay

    async def elicit(self, params: mcp_types.ElicitRequestFormParams) -> mcp_types.ElicitResult:
        """The answer of the waiting request's client, or else of the task's next poller.

        Without a waiting request the task goes `input_required` with the question until
        `tasks/update` (or an MRTR retry) delivers the answer.
        """
        if self._running.leg_approver is not None:
            return await self._running.leg_approver.elicit(params)
        meta: dict[str, Any] = {k: v for k, v in (params.meta or {}).items() if k != RELAY_META}
        if self._relay is not None:
            meta[RELAY_META] = self._relay
        request = mcp_types.ElicitRequest(params=params.model_copy(update={"meta": meta}))
        key = f"approval-{secrets.token_hex(6)}"
        running = self._running
        running.answer = asyncio.get_running_loop().create_future()
        wire = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        try:
            await self._turns._set(
                running, status="input_required", input_requests={key: wire}, input_responses=None
            )
            responses = await running.answer
        finally:
            running.answer = None
            if not running.record.finished:
                await asyncio.shield(
                    self._turns._set(running, status="working", input_requests=None, input_responses=None)
                )
        answer = responses.get(key)
        if answer is None:
            return mcp_types.ElicitResult(action="cancel")
        return mcp_types.ElicitResult.model_validate(answer)


LOST_ERROR = {"code": mcp_types.INTERNAL_ERROR, "message": TASK_LOST}


def _lost(record: TaskRecord) -> bool:
    """A task still running by its record, whose process has not marked it alive for too long."""
    stale = (now() - record.updated_at).total_seconds() > LOST_AFTER_SECONDS
    return not record.finished and stale


def _call_tool_result(outcome: ToolResult) -> CallToolResult:
    mcp = outcome.to_mcp_result()
    if isinstance(mcp, CallToolResult):
        return mcp
    if isinstance(mcp, tuple):
        content, structured = mcp
        return CallToolResult(content=content, structured_content=structured, _meta=outcome.meta)
    return CallToolResult(content=mcp, _meta=outcome.meta)


def _wire(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)
