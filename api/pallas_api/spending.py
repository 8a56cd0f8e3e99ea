"""Prices of models and budgets of agents: what LLM calls cost and how much a caller may spend.

A model's `price` (on `spec.model.capabilities` and each `spec.model.models` entry) is per million
tokens; `cost_of` turns a call's token counts into cost in the prices' unit (one currency per
deployment, e.g. USD). Budgets (`spec.budgets` on a PallasDeployment as the default, on a
PallasAgent field by field over it) limit tokens and/or cost per window (an hour, a day or a
month, aligned to UTC clock boundaries), for the agent as a whole and for each caller; a budget
follows the call chain through delegation (docs/api.md §3, "Prices and budgets").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field, model_validator

from pallas_api.wire import camel_config

Window = Literal["hour", "day", "month"]
"""A budget's window: an hour, a day or a month of UTC time, starting on the clock's boundary."""
DEFAULT_WARN_AT = 0.8
"""The share of a budget spent at which an agent warns (in progress and `get_health`)."""
MICROS = 1_000_000
"""Cost is counted in millionths of the prices' unit (whole numbers add up exactly)."""


class _Model(BaseModel):
    model_config = camel_config(extra="forbid", validate_default=True)


PricePerMillion = Annotated[float, Field(ge=0, le=1_000_000)]


class ModelPrice(_Model):
    """What a model costs per million tokens, in the deployment's currency (e.g. USD)."""

    input: PricePerMillion
    """Per million input tokens (not read from the provider's cache)."""
    output: PricePerMillion
    """Per million output tokens (reasoning tokens included)."""
    cached_input: PricePerMillion | None = None
    """Per million input tokens read from the provider's prompt cache; default: `input`."""

    def micros(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> int:
        """The cost of these token counts, in millionths of the currency (rounded up)."""
        cached = self.input if self.cached_input is None else self.cached_input
        # price per million tokens x tokens / 1e6 = currency; x 1e6 = micros: the factors cancel.
        total = input_tokens * self.input + output_tokens * self.output + cached_tokens * cached
        return math.ceil(total)


class BudgetLimit(_Model):
    """A limit on spend per window: tokens, cost or both (the first reached ends turns)."""

    window: Window
    """`hour`, `day` or `month` of UTC time; spend counts from the window's start and resets at
    the next boundary (the next full hour, midnight UTC, the 1st of the month)."""
    tokens: Annotated[int | None, Field(gt=0, le=10**15)] = None
    """Tokens (input, output and cached, of every LLM call) per window."""
    cost: Annotated[float | None, Field(gt=0, le=10**9)] = None
    """Cost per window in the prices' currency (models without a `price` cost nothing)."""

    @model_validator(mode="after")
    def _something_limited(self) -> Self:
        if self.tokens is None and self.cost is None:
            raise ValueError(f"a budget of window {self.window!r} needs tokens, cost or both")
        return self

    @property
    def cost_micros(self) -> int | None:
        """`cost` in millionths of the currency."""
        return None if self.cost is None else round(self.cost * MICROS)


class BudgetsSpec(_Model):
    """Budgets of spend (docs/api.md §3, "Prices and budgets").

    On an agent each field set overrides the deployment's.
    """

    agent: BudgetLimit | None = None
    """The agent as a whole: every caller's turns together (every replica of the agent)."""
    per_caller: BudgetLimit | None = None
    """Each caller on its own: the authenticated subject with inbound auth, else every
    anonymous client together. Delegated calls count against the root caller's."""
    warn_at: Annotated[float | None, Field(gt=0, lt=1)] = None
    """The share of a budget spent at which turns warn in progress notifications and
    `get_health` says degraded; default 0.8."""
    caller_metrics: bool | None = None
    """Label cost per caller in `pallas_llm_cost_by_caller_total{agent,caller}` (the first 100
    callers of a process by name, the rest as `other`); default false: callers are never labels."""


class BudgetConfig(_Model):
    """An agent's budgets as they apply: the deployment's, each field overridden by the agent's."""

    agent: BudgetLimit | None = None
    per_caller: BudgetLimit | None = None
    warn_at: Annotated[float, Field(gt=0, lt=1)] = DEFAULT_WARN_AT
    caller_metrics: bool = False

    @classmethod
    def merged(cls, deployment: BudgetsSpec, agent: BudgetsSpec) -> BudgetConfig:
        """The agent's budgets: each field the agent sets, else the deployment's, else the default."""
        return cls(
            agent=agent.agent or deployment.agent,
            per_caller=agent.per_caller or deployment.per_caller,
            warn_at=agent.warn_at or deployment.warn_at or DEFAULT_WARN_AT,
            caller_metrics=bool(
                agent.caller_metrics if agent.caller_metrics is not None else deployment.caller_metrics
            ),
        )

    @property
    def limited(self) -> bool:
        """Whether any budget applies."""
        return self.agent is not None or self.per_caller is not None


def window_start(window: Window, now: datetime) -> datetime:
    """The start of the window holding `now` (UTC)."""
    now = now.astimezone(UTC)
    if window == "hour":
        return now.replace(minute=0, second=0, microsecond=0)
    if window == "day":
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def window_end(window: Window, start: datetime) -> datetime:
    """When the window starting at `start` ends: when its spend resets."""
    if window == "hour":
        return start + timedelta(hours=1)
    if window == "day":
        return start + timedelta(days=1)
    if start.month == 12:
        return start.replace(year=start.year + 1, month=1)
    return start.replace(month=start.month + 1)


def format_cost(micros: int) -> str:
    """Cost for people: `0.0123` (micros as the currency, trailing zeros dropped)."""
    whole, part = divmod(micros, MICROS)
    return f"{whole}.{part:06d}".rstrip("0").rstrip(".")


class SpendReport(BaseModel):
    """What the agent as a whole spent in its budget's current window (`get_health`, status, registry)."""

    model_config = camel_config(extra="ignore", frozen=True)

    window: Window
    """The agent budget's window."""
    tokens: Annotated[int, Field(ge=0)]
    """Tokens spent in it so far, by every replica."""
    cost: Annotated[float, Field(ge=0)]
    """Cost spent in it so far, in the prices' currency."""
    token_limit: Annotated[int | None, Field(gt=0)] = None
    """The budget's `tokens` (absent: not limited)."""
    cost_limit: Annotated[float | None, Field(gt=0)] = None
    """The budget's `cost` (absent: not limited)."""
    resets_at: Annotated[str, Field(max_length=40)]
    """When the window ends and spend starts again from 0 (RFC 3339)."""


SPEND_META = "pallas.dev/spend"
"""`_meta` key of a `send_message` result: what its turn spent (`{tokens, cost}`)."""


def whole_count(value: Any) -> int | None:
    """A count >= 0 as a whole number, or None.

    A whole float counts: A2A metadata travels as a protobuf Struct, whose numbers are all doubles.
    """
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def reported_spend(meta: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(tokens, micros) a peer's result says its turn spent; None when it says nothing usable."""
    raw = (meta or {}).get(SPEND_META)
    if not isinstance(raw, Mapping):
        return None
    tokens, cost = whole_count(raw.get("tokens", 0)), raw.get("cost", 0)
    if tokens is None:
        return None
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0:
        return None
    return tokens, math.ceil(cost * MICROS)
