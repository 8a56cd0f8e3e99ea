"""The `get_health` report: what an agent answers and what the operator and registry read.

`{"status": "ok"|"degraded"|"error", "timestamp": ISO-8601, "message"?: str}` (docs/api.md §3):
`message` is required when not ok and names what is wrong. An agent with `busyAt` adds
`"busy": bool` and `"inFlight": int` (its send_message calls running now); being busy is not a
problem, so it leaves `status` alone (clients such as Daedalus know only the three values).
`"configHash"` names the config the answering process serves (`pallas_api.live.config_digest`):
the operator compares it with the ConfigMap's to report in status when a live edit has arrived.
`"missingSecrets"` lists the secrets its config names that have no value (a Secret or key that
does not exist): the operator reads no Secrets, so this is how it learns of them.
One model writes it (the agent) and the same model reads it (the operator's health checks, the
registry of `pallas run`), so the three never disagree on its shape.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pallas_api.conditions import HEALTH_STATUSES, HealthStatus
from pallas_api.fields import ToolPolicy
from pallas_api.spending import SpendReport
from pallas_api.validation import describe

__all__ = ["HEALTH_STATUSES", "HealthReport", "HealthReportError", "HealthStatus", "utc_timestamp"]

MAX_MESSAGE = 2000
"""Longest message a reader keeps (a report is published in status and the catalogue)."""


def utc_timestamp(now: datetime | None = None) -> str:
    """`2026-11-21T10:00:00Z`: RFC 3339 in UTC, to the second."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


class HealthReportError(ValueError):
    """A `get_health` answer that is not a health report; the message says what is wrong."""


RELOAD_OUTCOMES = ("applied", "refused", "invalid")
"""What became of a new version of an agent's config (`pallas_config_reloads_total{outcome}`)."""


class ServerState(BaseModel):
    """One downstream server or peer agent of a diagnostics report, as its probe found it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    up: bool


class Diagnostics(BaseModel):
    """What `get_health` adds when asked for diagnostics: reloads, servers and the tool policy."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    reloads: dict[str, int]
    """New config versions this process saw, by outcome (`RELOAD_OUTCOMES`): the counts of
    `pallas_config_reloads_total`."""
    servers: list[ServerState]
    """Every downstream server and peer agent the config names, probed now."""
    missing_servers: Annotated[list[str], Field(alias="missingServers")]
    """Servers the agent's spec names that its deployment does not define (it runs without them)."""
    tools: ToolPolicy
    """The policy over `<server>__<tool>` the agent applies now (`spec.tools`)."""


class HealthReport(BaseModel):
    """One answer of an agent's `get_health` tool."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    status: HealthStatus
    """`ok`: everything passed; `degraded`: serves, something it uses is down; `error`: cannot serve."""
    timestamp: Annotated[str, Field(min_length=1)]
    """When the report was made (RFC 3339)."""
    message: str | None = None
    """What is wrong; required when not ok."""
    busy: bool | None = None
    """Whether the calls in flight reached the agent's `busyAt` (absent without one)."""
    in_flight: Annotated[int | None, Field(alias="inFlight", ge=0)] = None
    """send_message calls running in the answering process (absent without `busyAt`)."""
    config_hash: Annotated[str | None, Field(alias="configHash", max_length=128)] = None
    """sha256 of the config the answering process serves (absent from older agents)."""
    missing_secrets: Annotated[list[str] | None, Field(alias="missingSecrets", max_length=100)] = None
    """Where each secret the agent's config names but has no value comes from, in the user's
    words (`Secret llm key OPENAI_API_KEY`); absent when none is missing."""

    spend: SpendReport | None = None
    """What the agent spent in its agent budget's current window (absent without one)."""

    diagnostics: Diagnostics | None = None
    """Reloads, servers and tool policy (only when the call asks: `get_health(diagnostics=true)`)."""

    @model_validator(mode="after")
    def _message_when_not_ok(self) -> Self:
        if self.status != "ok" and not (self.message or "").strip():
            raise ValueError(f"a {self.status!r} report must say what is wrong in 'message'")
        return self

    @classmethod
    def now(
        cls,
        status: HealthStatus,
        message: str | None = None,
        *,
        in_flight: int | None = None,
        busy_at: int | None = None,
        config_hash: str | None = None,
        missing_secrets: list[str] | None = None,
        spend: SpendReport | None = None,
        diagnostics: Diagnostics | None = None,
    ) -> HealthReport:
        """A report made at this moment; with `busy_at`, saying whether `in_flight` reached it."""
        report: dict[str, object] = {
            "status": status,
            "timestamp": utc_timestamp(),
            "message": message or None,
            "configHash": config_hash,
            "missingSecrets": missing_secrets or None,
            "spend": spend,
            "diagnostics": diagnostics,
        }
        if busy_at is not None and in_flight is not None:
            report.update(busy=in_flight >= busy_at, inFlight=in_flight)
        return cls.model_validate(report)

    def to_json(self) -> str:
        """The text the tool returns (no `message` key when there is none)."""
        return self.model_dump_json(exclude_none=True, by_alias=True)

    @classmethod
    def parse(cls, text: str) -> HealthReport:
        """Read a tool's text answer; a clear `HealthReportError` when it is not a report."""
        try:
            report = cls.model_validate_json(text)
        except ValidationError as exc:
            raise HealthReportError(
                f"get_health did not return a health report ({describe(exc, whole='the answer', limit=1)})"
            ) from None
        if report.message is not None and len(report.message) > MAX_MESSAGE:
            report = report.model_copy(update={"message": report.message[:MAX_MESSAGE]})
        return report

    @property
    def checked_at(self) -> datetime | None:
        """The timestamp as a time, or None when it does not parse."""
        try:
            return datetime.fromisoformat(self.timestamp.replace("Z", "+00:00"))
        except ValueError:
            return None
