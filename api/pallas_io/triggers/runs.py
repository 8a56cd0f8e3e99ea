"""A trigger's runs: whether a firing runs, the run itself, its record, metrics and delivery.

Every firing goes through `TriggerEngine.fire`: suspended → nothing; `concurrencyPolicy`
(`admit`) → skip or stop the runs in flight; `maxRunsPerMinute` → drop; then the message is
rendered (a failure is a failed run naming the variable), the run is recorded `Running` and
only then started, so whoever keeps the record (status in a cluster) knows of a run before it
can have any effect. The owner gets each new status through `on_change`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from typing import Literal

import httpx2

from pallas_api.spec import PallasTriggerSpec
from pallas_api.status import ANSWER_EXCERPT_CHARS, PallasTriggerStatus, TriggerRun
from pallas_api.triggers.policy import RateWindow, admit, prune
from pallas_api.triggers.restart import INTERRUPTED, INTERRUPTED_MESSAGE, settle_interrupted
from pallas_api.triggers.signature import PALLAS_SIGNATURE, pallas_signature
from pallas_api.triggers.template import TemplateError
from pallas_io.triggers.call import Answer, RunFailed, call_agent, identity
from pallas_io.triggers.metrics import TriggerMetrics

log = logging.getLogger("pallas.triggers")
DELIVERY_TIMEOUT = 10.0
RunEnd = Literal["Succeeded", "Failed"]
Fired = Literal["started", "failed", "skipped", "dropped", "suspended"]
Credentials = Callable[[], Awaitable[Mapping[str, str]]]
"""Headers for the next call (the operator: a ServiceAccount token it mints and renews)."""
AgentCall = Callable[[str, str, str, Mapping[str, str], str], Awaitable[Answer]]
"""(url, message, conversation id, headers, caller) → the answer; `call.call_agent`."""


def rfc3339(moment: datetime) -> str:
    """A UTC time as Kubernetes writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class TriggerTarget:
    """One trigger as a process runs it: its spec, its agent's URL, what calls carry."""

    namespace: str
    name: str
    spec: PallasTriggerSpec
    agent_url: str
    _: KW_ONLY  # what calls carry is named at every construction: a token is never a URL by position
    headers: Mapping[str, str] = field(default_factory=dict)
    """Sent with every call (the host's credential); never logged."""
    credentials: Credentials | None = None
    """Headers fetched before each call (a short-lived token the host renews); never logged."""
    deliver_secret: bytes | None = None
    """Signs deliveries (`spec.deliver.webhook.secretRef`'s value)."""

    @property
    def key(self) -> str:
        """`<namespace>/<name>`: the metrics' `trigger` label and the audit name's tail."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Firing:
    """What one firing came to."""

    fired: Fired
    run: TriggerRun | None = None


class TriggerEngine:
    """The runs of one trigger in this process."""

    def __init__(
        self,
        target: TriggerTarget,
        metrics: TriggerMetrics,
        *,
        on_change: Callable[[PallasTriggerStatus], None] | None = None,
        on_run_end: Callable[[TriggerRun], None] | None = None,
        call: AgentCall = call_agent,
        status: PallasTriggerStatus | None = None,
    ) -> None:
        self.target = target
        self._metrics = metrics
        self._on_change = on_change
        self._on_run_end = on_run_end
        self._call = call
        self._rate = RateWindow(target.spec.max_runs_per_minute)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._replaced: set[str] = set()
        # Runs another process left Running are closed, never run again (`triggers.restart`).
        self.status = settle_interrupted(status or PallasTriggerStatus(), (), rfc3339(datetime.now(UTC)))
        self._first_conversation: str | None = target.spec.conversation.id

    def amend(self, status: PallasTriggerStatus) -> None:
        """Take `status` as the trigger's (its owner's conditions added), and report it if new."""
        if status == self.status:
            return  # nothing to write: reconciles of an unchanged trigger cost no API request
        self._change(**{name: getattr(status, name) for name in PallasTriggerStatus.model_fields})

    def running(self) -> int:
        """Runs in flight."""
        return len(self._tasks)

    async def fire(self, variables: Mapping[str, object], scheduled: datetime | None = None) -> Firing:
        """Run the agent once for this firing, if the trigger's policies let it."""
        spec = self.target.spec
        if spec.suspend:
            return Firing("suspended")
        decision = admit(spec.concurrency_policy, self.running())
        if decision == "skip":
            self._count_not_run("skipped")
            self._change(skipped_runs=self.status.skipped_runs + 1)
            return Firing("skipped")
        if not self._rate.take(time.monotonic()):
            self._count_not_run("rate")
            self._change(dropped_runs=self.status.dropped_runs + 1)
            log.warning("trigger %s: firing dropped: more than %d runs this minute", self.target.key,
                        spec.max_runs_per_minute)  # fmt: skip
            return Firing("dropped")
        if decision == "replace":
            await self._stop_all(replaced=True)
        return self._start(variables, scheduled)

    def planned(self, handled: datetime | None, upcoming: datetime, skipped: int) -> None:
        """Record a schedule's plan: the time handled, the next one, the times never run."""
        if skipped:
            self._count_not_run("skipped", skipped)
        fields: dict[str, object] = {
            "next_run_time": rfc3339(upcoming),
            "skipped_runs": self.status.skipped_runs + skipped,
        }
        if handled is not None:
            fields["last_schedule_time"] = rfc3339(handled)
        self._change(**fields)

    def _start(self, variables: Mapping[str, object], scheduled: datetime | None) -> Firing:
        now = datetime.now(UTC)
        run_id = uuid.uuid4().hex[:12]
        conversation = self._conversation_id(run_id)
        run = TriggerRun(
            id=run_id,
            outcome="Running",
            start_time=rfc3339(now),
            scheduled_time=rfc3339(scheduled) if scheduled else None,
            conversation_id=conversation,
        )
        values = {
            **variables,
            "trigger": {"name": self.target.name, "namespace": self.target.namespace},
            "run": {"id": run_id, "scheduledTime": run.scheduled_time or run.start_time},
        }
        try:
            message = self.target.spec.template().render(values)
        except TemplateError as exc:
            failed = self._finish(run, "Failed", reason="TemplateFailed", message=str(exc))
            return Firing("failed", failed)
        self._record(run, last_run_time=run.start_time)
        self._tasks[run_id] = asyncio.create_task(self._run(run, message), name=f"trigger {self.target.key}")
        return Firing("started", run)

    def _conversation_id(self, run_id: str) -> str:
        if self.target.spec.conversation.mode == "continue":
            if self._first_conversation is None:
                self._first_conversation = f"trigger-{self.target.name}-{uuid.uuid4().hex[:12]}"
            return self._first_conversation
        return f"trigger-{self.target.name}-{run_id}"

    async def _run(self, run: TriggerRun, message: str) -> None:
        target = self.target
        try:
            answer = await asyncio.wait_for(
                self._call(target.agent_url, message, run.conversation_id or "", await self._headers(),
                           identity(target.namespace, target.name)),
                target.spec.timeout_seconds,
            )  # fmt: skip
        except RunFailed as exc:
            self._finish(run, "Failed", reason=exc.reason, message=str(exc))
        except TimeoutError:
            message = f"the agent did not answer within timeoutSeconds ({target.spec.timeout_seconds})"
            self._finish(run, "Failed", reason="Timeout", message=message)
        except asyncio.CancelledError:
            replaced = run.id in self._replaced
            reason, why = (
                ("Replaced", "a newer firing replaced it (concurrencyPolicy Replace)")
                if replaced
                else (INTERRUPTED, INTERRUPTED_MESSAGE)
            )
            self._finish(run, "Failed", reason=reason, message=why)
            raise
        else:
            if answer.conversation_id and target.spec.conversation.mode == "continue":
                self._first_conversation = answer.conversation_id
            finished = self._finish(
                run,
                "Succeeded",
                answer_excerpt=answer.text[:ANSWER_EXCERPT_CHARS],
                tokens=answer.tokens,
                cost=answer.cost,
                conversation_id=answer.conversation_id,
            )
            await self._deliver(finished, answer.text)
        finally:
            self._tasks.pop(run.id, None)
            self._replaced.discard(run.id)

    async def _headers(self) -> Mapping[str, str]:
        """The call's headers: the target's, and fresh credentials when the host gives some.

        Raises:
            RunFailed: no credential could be had (the message says why, never a token).
        """
        target = self.target
        if target.credentials is None:
            return target.headers
        try:
            return {**target.headers, **(await target.credentials())}
        except Exception as exc:  # noqa: BLE001 - whatever the host's failure, this run cannot go on
            raise RunFailed("CredentialsUnavailable", f"no credential for the call: {exc}") from None

    def _finish(
        self, run: TriggerRun, outcome: Literal["Succeeded", "Failed"], **fields: object
    ) -> TriggerRun:
        done = run.model_copy(
            update={"outcome": outcome, "completion_time": rfc3339(datetime.now(UTC)), **fields}
        )
        self._metrics.runs_total.labels(self.target.key, outcome).inc()
        if outcome == "Failed":
            log.warning("trigger %s: run %s failed: %s", self.target.key, run.id, done.message)
        else:
            log.info("trigger %s: run %s succeeded", self.target.key, run.id)
        self._record(done)
        if self._on_run_end is not None:
            self._on_run_end(done)
        return done

    def _record(self, run: TriggerRun, **status: object) -> None:
        others = [r for r in self.status.runs if r.id != run.id]
        limit = self.target.spec.history_limit
        runs = prune([run, *others], succeeded=limit.succeeded, failed=limit.failed)
        self._change(runs=sorted(runs, key=lambda r: r.start_time, reverse=True), **status)

    def _change(self, **fields: object) -> None:
        self.status = self.status.model_copy(update=fields)
        if self._on_change is not None:
            self._on_change(self.status)

    def _count_not_run(self, reason: str, count: int = 1) -> None:
        self._metrics.dropped_total.labels(self.target.key, reason).inc(count)

    async def _deliver(self, run: TriggerRun, answer: str) -> None:
        """POST the answer to `spec.deliver.webhook`; a failure is logged, the run stays succeeded."""
        deliver = self.target.spec.deliver
        if deliver is None or deliver.webhook is None:
            return
        body = json.dumps(
            {"trigger": self.target.key, "run": run.id, "outcome": run.outcome, "answer": answer,
             "conversationId": run.conversation_id}
        ).encode()  # fmt: skip
        headers = {"Content-Type": "application/json"}
        if self.target.deliver_secret:
            headers[PALLAS_SIGNATURE] = pallas_signature(self.target.deliver_secret, body)
        try:
            async with httpx2.AsyncClient(timeout=DELIVERY_TIMEOUT) as http:
                response = await http.post(deliver.webhook.url, content=body, headers=headers)
            if response.status_code >= 300:
                log.warning("trigger %s: delivery of run %s answered %d", self.target.key, run.id,
                            response.status_code)  # fmt: skip
        except httpx2.HTTPError as exc:
            log.warning(
                "trigger %s: delivery of run %s failed: %s", self.target.key, run.id, type(exc).__name__
            )

    async def _stop_all(self, *, replaced: bool) -> None:
        tasks = list(self._tasks.items())
        for run_id, task in tasks:
            if replaced:
                self._replaced.add(run_id)
            task.cancel()
        await asyncio.gather(*(t for _, t in tasks), return_exceptions=True)

    async def wait_idle(self) -> None:
        """Wait until no run is in flight (tests and draining)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def close(self) -> None:
        """Stop the runs in flight; each is recorded failed (Interrupted)."""
        await self._stop_all(replaced=False)
