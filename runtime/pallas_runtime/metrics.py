"""Prometheus metrics of agent processes (docs/api.md §5).

One `RuntimeMetrics` per process holds its own CollectorRegistry (no clashes across tests or
with libraries using the default registry); every agent served by the process labels its
series with `agent`. Labels stay bounded: never a user, conversation or message.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, Self

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from pallas_io.triggers.metrics import trigger_metrics

# `*_created` series double the exposition size and nothing in our dashboards reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""Classic text format: what every Prometheus version and promtool accept (and the default)."""

_MESSAGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
_LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
_TOOL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
HEALTH_VALUES = {"ok": 1.0, "degraded": 0.5, "error": 0.0}
AUTH_OUTCOMES = ("allowed", "denied", "unauthenticated", "unavailable")
"""The `outcome` values of `pallas_auth_requests_total`."""


class _KnownSeries:
    """`labels` that returns a series made before without prometheus_client's work.

    Its `labels` checks the names, converts every value with `str` and takes a lock on each
    call, even for a series it made long ago: about eight calls, and a turn labels some fourteen
    series (each model call four). A series made before is looked up here in the dict `labels`
    keeps them in (`_metrics`, keyed by the values as strings), without the lock: a dict read
    needs none, only a series' creation does. Values that are not the strings they would be
    converted to miss and take `labels` itself (no runtime label value is a `str` subclass with
    another `str`, the one case a lookup could tell apart from a conversion).
    """

    _metrics: dict[Sequence[str], Any]  # only a labelled parent has it (prometheus_client)

    def labels(self, *labelvalues: object, **labelkwargs: object) -> Self:
        if labelvalues and not labelkwargs:
            try:
                known: Self | None = self._metrics.get(labelvalues)  # type: ignore[arg-type]
            except AttributeError:  # a child or an unlabelled metric: `labels` says what is wrong
                known = None
            if known is not None:
                return known
        return super().labels(*labelvalues, **labelkwargs)  # type: ignore[misc, no-any-return]


class _Counter(_KnownSeries, Counter):
    pass


class _Gauge(_KnownSeries, Gauge):
    pass


class _Histogram(_KnownSeries, Histogram):
    pass


class RuntimeMetrics:
    """The metric families of an agent process."""

    def __init__(self, *, process_collectors: bool = True) -> None:
        self.registry = CollectorRegistry()
        if process_collectors:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        # Every family of this process goes in its own registry.
        gauge = partial(_Gauge, registry=self.registry)
        counter = partial(_Counter, registry=self.registry)
        histogram = partial(_Histogram, registry=self.registry)
        self.up = gauge("pallas_up", "1 while the Pallas process runs.")
        self.up.set(1)
        self.agent_info = gauge(
            "pallas_agent_info",
            "1 per agent served, with the port it listens on (empty when not known); a join source.",
            ["agent", "model", "port"],
        )
        self.send_message_total = counter(
            "pallas_send_message_total", "send_message calls.", ["agent", "outcome"]
        )
        self.send_message_duration = histogram(
            "pallas_send_message_duration_seconds",
            "send_message wall-clock duration, the whole agent loop.",
            ["agent"],
            buckets=_MESSAGE_BUCKETS,
        )
        self.send_message_turns_total = counter(
            "pallas_send_message_turns_total",
            "send_message turns started, by the model they run on (the agent's or a declared one a "
            "call chose) and whether the call appended to the system prompt.",
            ["agent", "model", "system_append"],
        )
        self.llm_turns_total = counter("pallas_llm_turns_total", "LLM round trips.", ["agent", "model"])
        self.llm_request_duration = histogram(
            "pallas_llm_request_duration_seconds",
            "Duration of one LLM request, retries included.",
            ["agent", "model", "outcome"],
            buckets=_LLM_BUCKETS,
        )
        self.llm_tokens_total = counter(
            "pallas_llm_tokens_total",
            "Tokens by kind (input, output, cache_read, cache_write, cache_hit, reasoning).",
            ["agent", "model", "kind"],
        )
        self.tool_calls_total = counter(
            "pallas_tool_calls_total",
            "Downstream MCP operations.",
            ["agent", "server", "operation", "outcome"],
        )
        self.tool_call_duration = histogram(
            "pallas_tool_call_duration_seconds",
            "Downstream MCP operation duration.",
            ["agent", "server", "operation"],
            buckets=_TOOL_BUCKETS,
        )
        self.tool_denied_total = counter(
            "pallas_tool_denied_total", "Tool calls refused by the agent's tool policy.", ["agent", "server"]
        )
        self.downstream_up = gauge(
            "pallas_downstream_up",
            "1 when the downstream server passed the last get_health probe.",
            ["agent", "server"],
        )
        self.llm_provider_up = gauge(
            "pallas_llm_provider_up", "1 when the active LLM provider passed its last check.", ["provider"]
        )
        self.agent_health_status = gauge(
            "pallas_agent_health_status", "Last get_health: 1 ok, 0.5 degraded, 0 error.", ["agent"]
        )
        self.requests_refused = counter(
            "pallas_requests_refused",
            "Requests refused before reaching the app, by reason (too_large, credentials, duplicate_id, "
            "head_too_large, too_many_headers, uri_too_long, head_timeout).",
            ["agent", "reason"],
        )
        self.auth_requests_total = counter(
            "pallas_auth_requests_total",
            "MCP requests by access decision (allowed, denied, unauthenticated, unavailable).",
            ["agent", "outcome"],
        )
        self.send_message_in_flight = gauge(
            "pallas_send_message_in_flight",
            "send_message calls running now (what busyAt is compared with).",
            ["agent"],
        )
        self.last_turn_time = gauge(
            "pallas_last_turn_timestamp_seconds",
            "When this process last started a turn (Unix seconds; absent before the first): the idle signal.",
            ["agent"],
        )
        self.active_conversations = gauge(
            "pallas_active_conversations", "Conversations held in memory.", ["agent"]
        )
        self.llm_cost_total = counter(
            "pallas_llm_cost_total",
            "Cost of LLM calls in the prices' currency (spec.model price; unpriced models cost 0).",
            ["agent", "model"],
        )
        self.llm_cost_by_caller_total = counter(
            "pallas_llm_cost_by_caller_total",
            "Cost of LLM calls by caller (only with budgets.callerMetrics; at most 100 callers, then other).",
            ["agent", "caller"],
        )
        self.config_reloads_total = counter(
            "pallas_config_reloads_total",
            "New versions of the agent's config seen while serving, by outcome (applied; refused: "
            "it needs a new process; invalid: it does not parse or validate).",
            ["agent", "outcome"],
        )
        self.budget_exceeded_total = counter(
            "pallas_budget_exceeded_total",
            "Turns ended with BUDGET_EXCEEDED, by budget (agent, caller, chain).",
            ["agent", "budget"],
        )
        self.triggers = trigger_metrics(self.registry)
        """The runs of the PallasTriggers `pallas run` hosts."""

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)

    def negotiated(self, accept: str) -> tuple[bytes, str]:
        """The registry in the format `accept` asks for, and its content type.

        OpenMetrics (what Prometheus asks for first) carries the latency histograms' exemplars:
        the trace id of an observation made under a span (docs/api.md §5, Traces).
        """
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type
