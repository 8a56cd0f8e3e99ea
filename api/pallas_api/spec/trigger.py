"""The PallasTrigger spec: an agent run on a schedule, a webhook or a Kubernetes event.

A trigger names an agent of its namespace and a message template; each firing renders the
message and sends it to the agent as any MCP client would (docs/triggers.md). Exactly one
source: `schedule`, `webhook` or `event`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from pallas_api.fields import ONCE, SET
from pallas_api.names import DNS_LABEL
from pallas_api.spec.common import LabelSelector, SecretKeyRef, SpecModel
from pallas_api.triggers.policy import ConcurrencyPolicy
from pallas_api.triggers.schedule import ScheduleError, parse_schedule
from pallas_api.triggers.signature import SignatureKind
from pallas_api.triggers.template import Template, TemplateError, parse_template
from pallas_api.triggers.when import ConditionError, compile_condition

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
MAX_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_TIMEOUT_SECONDS = 600
SCHEDULE_VARIABLES = frozenset({"trigger", "run"})
WEBHOOK_VARIABLES = SCHEDULE_VARIABLES | {"body"}
EVENT_VARIABLES = SCHEDULE_VARIABLES | {"object", "type", "reason"}
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


def _added_and_modified() -> list[EventType]:
    return ["ADDED", "MODIFIED"]


class TriggerSchedule(SpecModel):
    """When a schedule trigger fires."""

    cron: Annotated[str, Field(min_length=1, max_length=256)]
    """A five-field cron expression (`0 7 * * 1-5`), a macro (`@hourly`, `@daily`…) or
    `@every <duration>` (`@every 30s`, `@every 1h30m`; at least 1s, counted from the trigger's
    creation)."""
    time_zone: Annotated[str | None, Field(max_length=64)] = None
    """IANA time zone of the cron fields, e.g. `Europe/Paris`. Default UTC."""

    @model_validator(mode="after")
    def _readable(self) -> Self:
        try:
            parse_schedule(self.cron, self.time_zone)
        except ScheduleError as exc:
            raise ValueError(str(exc)) from None
        return self


class TriggerWebhook(SpecModel):
    """A webhook trigger: signed requests to its path fire it."""

    signature: SignatureKind
    """How the sender signs: `github` (X-Hub-Signature-256), `slack` (X-Slack-Signature v0 with
    its timestamp), `hmac-sha256` (X-Pallas-Signature-256: sha256=<hex>) or `bearer`
    (Authorization: Bearer <secret>)."""
    secret_ref: SecretKeyRef
    """The shared secret (for `bearer`, the token)."""
    max_body_bytes: Annotated[int, Field(ge=1, le=MAX_MAX_BODY_BYTES)] = DEFAULT_MAX_BODY_BYTES
    """The largest body accepted; a larger one is refused with 413 before it is read whole.
    Default 1 MiB."""


class TriggerEvent(SpecModel):
    """A Kubernetes event trigger: a watch of one kind (run by the operator only)."""

    api_version: Annotated[str, Field(min_length=1, max_length=253)]
    """The watched kind's apiVersion, e.g. `v1` or `apps/v1`."""
    kind: Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]*$", max_length=63)]
    """The watched kind, e.g. `Pod`; the chart's values must allow it."""
    namespace: Annotated[str | None, Field(pattern=DNS_LABEL, max_length=63)] = None
    """Only objects of this namespace; default the trigger's own."""
    label_selector: LabelSelector | None = None
    """Only objects with these labels."""
    types: Annotated[list[EventType], Field(min_length=1, max_length=3), SET, ONCE] = Field(
        default_factory=_added_and_modified
    )
    """Which changes fire: ADDED, MODIFIED, DELETED. Default ADDED and MODIFIED."""
    when: Annotated[str | None, Field(min_length=1, max_length=4096)] = None
    """A CEL expression over `object` (and `oldObject`, `type`) that must be true to fire, e.g.
    `object.status.containerStatuses.exists(c, c.restartCount > 3)`. One that fails on an object
    (a field it lacks) does not fire."""

    @field_validator("when")
    @classmethod
    def _compiles(cls, when: str | None) -> str | None:
        if when is not None:
            try:
                compile_condition(when)
            except ConditionError as exc:
                raise ValueError(str(exc)) from None
        return when


class TriggerConversation(SpecModel):
    """Which conversation a run speaks in."""

    mode: Literal["new", "continue"] = "new"
    """`new`: each run starts a conversation; `continue`: every run continues one (`id`, else
    the one the first run started)."""
    id: Annotated[str | None, Field(min_length=1, max_length=256)] = None
    """The conversation `continue` speaks in (one the trigger's identity may continue)."""

    @model_validator(mode="after")
    def _id_only_to_continue(self) -> Self:
        if self.id is not None and self.mode != "continue":
            raise ValueError("conversation.id is only used with mode continue")
        return self


class DeliverWebhook(SpecModel):
    """Where a run's answer is POSTed."""

    url: Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=2048)]
    """The receiver's URL."""
    secret_ref: SecretKeyRef | None = None
    """Signs each delivery: `X-Pallas-Signature-256: sha256=<hex HMAC-SHA256 of the body>`."""


class TriggerDeliver(SpecModel):
    """What is done with a run's answer besides recording its excerpt."""

    webhook: DeliverWebhook | None = None
    """POST `{trigger, run, outcome, answer, conversationId}` as JSON to a URL."""


class HistoryLimit(SpecModel):
    """How many finished runs status keeps."""

    succeeded: Annotated[int, Field(ge=0, le=100)] = 10
    """Successful runs kept. Default 10."""
    failed: Annotated[int, Field(ge=0, le=100)] = 5
    """Failed runs kept. Default 5."""


class PallasTriggerSpec(SpecModel):
    """A PallasTrigger: run an agent on a schedule, a webhook or a Kubernetes event."""

    agent: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    """The PallasAgent (same namespace) each run sends the message to."""
    message: Annotated[str, Field(min_length=1, max_length=16384)]
    """The message, a template: `{{ .path }}` inserts a value (`.trigger.name`, `.run.id`,
    `.run.scheduledTime`; a webhook's `.body`; an event's `.object`, `.type` and `.reason`)."""
    schedule: TriggerSchedule | None = None
    """Fire on a schedule."""
    webhook: TriggerWebhook | None = None
    """Fire on a signed HTTP request."""
    event: TriggerEvent | None = None
    """Fire on a change of a Kubernetes object."""
    concurrency_policy: ConcurrencyPolicy = "Forbid"
    """While a run is in flight: `Allow` another, `Forbid` (skip the firing; default: an agent
    run costs tokens, and two at once rarely help) or `Replace` (stop it, start the new one)."""
    conversation: TriggerConversation = Field(default_factory=TriggerConversation)
    """Which conversation runs speak in. Default: a new one per run."""
    deliver: TriggerDeliver | None = None
    """Send the answer somewhere besides status."""
    suspend: bool = False
    """Fire nothing while true (webhooks answer 409). In a cluster, suspending stops the
    trigger's schedule: a run in flight is stopped and recorded failed (Interrupted)."""
    history_limit: HistoryLimit = Field(default_factory=HistoryLimit)
    """How many finished runs status keeps."""
    starting_deadline_seconds: Annotated[int | None, Field(ge=1, le=86400 * 7)] = None
    """A missed schedule time still runs if at most this old (as CronJob's); older ones are
    skipped and counted. Default: the newest missed time always runs once."""
    max_runs_per_minute: Annotated[int, Field(ge=1, le=600)] = 10
    """Runs started in any minute at most; further firings are dropped and counted."""
    timeout_seconds: Annotated[int, Field(ge=1, le=86400)] = DEFAULT_TIMEOUT_SECONDS
    """A run not answered by then is stopped and recorded failed. Default 600."""

    @field_validator("message")
    @classmethod
    def _readable_template(cls, message: str) -> str:
        try:
            parse_template(message)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None
        return message

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        sources = [s for s in ("schedule", "webhook", "event") if getattr(self, s) is not None]
        if len(sources) != 1:
            raise ValueError("a trigger needs exactly one of schedule, webhook, event")
        self.template().check_variables(self.variables())
        return self

    def source(self) -> Literal["schedule", "webhook", "event"]:
        """Which source fires this trigger."""
        return "schedule" if self.schedule else "webhook" if self.webhook else "event"

    def variables(self) -> frozenset[str]:
        """The template variables this trigger's source offers."""
        return {"schedule": SCHEDULE_VARIABLES, "webhook": WEBHOOK_VARIABLES, "event": EVENT_VARIABLES}[
            self.source()
        ]

    def template(self) -> Template:
        """The parsed message."""
        return parse_template(self.message)
