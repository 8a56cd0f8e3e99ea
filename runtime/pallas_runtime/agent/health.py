"""`get_health`: downstream probes plus the active LLM provider's last check; never calls the LLM.

Semantics (docs/api.md §3, `get_health`):
- every downstream server and peer agent is probed in parallel (MCP initialize, then DELETE of
  the session), each bounded by `health.probeTimeoutSeconds` (3 s);
- the provider's preflight result (models endpoint) is reused until it is older than
  `health.providerRecheckSeconds`, then refreshed in the background: `get_health` never waits
  for the LLM endpoint (a hanging one used to add its 5 s timeout to the call); a failed check
  is reported with its age; before the first check finishes the provider is not judged;
- `ok` when everything passed, with a note on sources that are up but want something (a
  downstream that forwards the caller's bearer and refuses a probe without one: "Needs caller
  credentials: mnemosyne"); `degraded` when a downstream or the provider check failed, or
  when checking callers failed lately (the API server or the issuer did not answer: those
  requests were refused with 503), when a header's secret has no value (it is not sent), or
  when the LLM or a downstream server has been slow lately (`agent/latency.py`: "Slow: LLM avg
  12.3s over 20 calls (over 10s)");
  `degraded` too when its `servers` names servers its deployment does not define (it runs
  without them: "Servers: mcpServers x not defined by the deployment: …");
  `error` when the agent cannot serve any request: its provider's API key is not configured.
  `message` names each problem;
- with `busyAt`, `busy` and `inFlight` say whether this process's send_message calls in flight
  reached it (a load signal for clients and the registry, not a problem: `status` is unchanged);
- `configHash` names the config the agent serves now and `missingSecrets` the secrets its config
  names that have no value (the operator reads neither Secrets nor their keys, so this is how
  a missing Secret or key reaches the PallasAgent's status). Each report first takes a changed
  config or secret (`agent.live`), so an idle agent reports an edit at the next health check.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from pallas_api.config import AgentConfig
from pallas_api.health import Diagnostics, HealthReport, HealthStatus, ServerState, utc_timestamp
from pallas_api.references import servers_not_found
from pallas_api.spending import MICROS, SpendReport
from pallas_runtime.agent.live import Generation, LiveAgent
from pallas_runtime.conversations.model import ConversationStore
from pallas_runtime.downstream.source import ProbeResult
from pallas_runtime.llm.factory import resolve_api_key
from pallas_runtime.llm.provider import LLMProvider, ProviderCheck, missing_key_message
from pallas_runtime.metrics import HEALTH_VALUES, RuntimeMetrics
from pallas_runtime.spending.guard import AgentSpend


class HealthChecker:
    """Computes health reports and keeps the health gauges current."""

    def __init__(
        self,
        live: LiveAgent,
        metrics: RuntimeMetrics,
        store: ConversationStore | None = None,
        access_problem: Callable[[], str | None] | None = None,
        in_flight: Callable[[], int] | None = None,
        spend: Callable[[AgentConfig], Awaitable[AgentSpend | None]] | None = None,
    ) -> None:
        self._live = live
        self._spend = spend
        self._in_flight = in_flight
        self._store = store
        self._access_problem = access_problem
        self._metrics = metrics
        self._provider_check: ProviderCheck | None = None
        self._checked: LLMProvider | None = None
        """The provider `_provider_check` is about: a new one (a new key, model or endpoint) is
        checked afresh, and its predecessor's result no longer counts."""
        self._provider_probe: asyncio.Task[ProviderCheck] | None = None
        self._probed: LLMProvider | None = None
        self._refresh: asyncio.Task[None] | None = None

    @property
    def provider_check(self) -> ProviderCheck | None:
        """The current provider's last check, if any."""
        return self._provider_check if self._checked is self._live.generation.provider else None

    async def check_provider(self) -> ProviderCheck:
        """Probe the current provider's models endpoint; concurrent callers share one probe."""
        with self._live.hold() as generation:
            provider = generation.provider
            if self._provider_probe is None or self._provider_probe.done() or self._probed is not provider:
                self._provider_probe = asyncio.create_task(provider.preflight())
                self._probed = provider
            check = await asyncio.shield(self._provider_probe)
            if provider is self._live.generation.provider:
                self._provider_check, self._checked = check, provider
            self._metrics.llm_provider_up.labels(generation.config.provider.name).set(1 if check.ok else 0)
            return check

    def _current_provider_check(self, generation: Generation) -> ProviderCheck | None:
        """The last check, never waited for: a missing or stale one is refreshed in the background."""
        check = self._provider_check if self._checked is generation.provider else None
        max_age = generation.config.health.provider_recheck_seconds
        stale = check is None or time.monotonic() - check.checked_at > max_age
        if stale and (self._provider_probe is None or self._provider_probe.done()):
            self._refresh = asyncio.create_task(self._refresh_quietly())
        return check

    async def _refresh_quietly(self) -> None:
        with contextlib.suppress(Exception):  # a failed check is a result; anything else: next time
            await self.check_provider()

    async def report(self, *, diagnostics: bool = False) -> HealthReport:
        """The `get_health` document: status, timestamp, the config served and, when not ok, a message.

        With `diagnostics`, also the config's reload counts, every source's probe and the tool
        policy (`HealthReport.diagnostics`).
        """
        with self._live.hold() as generation:
            provider = self._current_provider_check(generation)
            probes, store, spend = await asyncio.gather(
                asyncio.gather(*(s.probe() for s in generation.sources)),
                self._store.check() if self._store is not None else _nothing(),
                self._spent(generation.config),
            )
            report = self._summarize(generation, list(probes), provider, store, spend)
        if not diagnostics:
            return report
        found = Diagnostics(
            reloads=dict(self._live.reloads),
            servers=[ServerState(name=p.source, up=p.ok) for p in probes],
            missing_servers=list(generation.config.missing_servers),
            tools=generation.config.tools,
        )
        return report.model_copy(update={"diagnostics": found})

    async def _spent(self, config: AgentConfig) -> AgentSpend | None:
        """The agent budget's window as the ledger has it (None: no such budget, or unreadable)."""
        if self._spend is None:
            return None
        try:
            return await self._spend(config)
        except Exception:  # noqa: BLE001 - the store's own check reports an unreachable store
            return None

    def _summarize(
        self,
        generation: Generation,
        probes: list[ProbeResult],
        provider: ProviderCheck | None,
        store: str | None,
        spend: AgentSpend | None = None,
    ) -> HealthReport:
        config = generation.config
        agent = config.name
        for probe in probes:
            self._metrics.downstream_up.labels(agent, probe.source).set(1 if probe.ok else 0)
        problems = []
        unreachable = [f"{p.source} ({p.message})" if p.message else p.source for p in probes if not p.ok]
        if unreachable:
            problems.append("Unreachable: " + ", ".join(unreachable))
        if config.missing_servers:  # the agent runs without them (`pallas_api.references`)
            problems.append("Servers: " + servers_not_found(config.missing_servers).message)
        key_problem = None
        if resolve_api_key(config.provider, generation.secrets) is None:
            key_problem = f"LLM: {missing_key_message(config.provider)}"
        missing = generation.missing_secrets
        if key_problem is not None:  # known without asking the provider
            problems.append(key_problem)
        elif provider is not None and not provider.ok:
            age = time.monotonic() - provider.checked_at
            problems.append(f"LLM: {provider.message} (checked {age:.0f}s ago)")
        if store is not None:
            problems.append(f"Conversations: {store}")
        access = self._access_problem() if self._access_problem is not None else None
        if access:
            problems.append(f"Access: {access}")
        headers = [m for m in missing if key_problem is None or m != config.provider.api_key_origin()]
        if headers:
            problems.append("Headers not sent, no value: " + ", ".join(headers))
        budget_problem, budget_note, report = _budget(config, spend)
        if budget_problem:
            problems.append(budget_problem)
        slow = self._live.latencies.slow(config.health.slow_llm_seconds, config.health.slow_tool_seconds)
        if slow:
            problems.append("Slow: " + ", ".join(s.describe() for s in slow))
        status: HealthStatus
        if key_problem is not None:
            status = "error"
        elif problems:
            status = "degraded"
        else:
            status = "ok"
        self._metrics.agent_health_status.labels(agent).set(HEALTH_VALUES[status])
        in_flight = self._in_flight() if self._in_flight is not None else None
        return HealthReport.now(
            status,
            "; ".join([*problems, *_notes(probes), *([budget_note] if budget_note else [])]),
            in_flight=in_flight,
            busy_at=config.busy_at,
            config_hash=generation.config_hash,
            missing_secrets=missing,
            spend=report,
        )


def _budget(
    config: AgentConfig, spend: AgentSpend | None
) -> tuple[str | None, str | None, SpendReport | None]:
    """The agent budget's problem when spent (degraded), note past `warnAt`, and report."""
    if spend is None:
        return None, None, None
    limit, spent, resets = spend
    report = SpendReport(
        window=limit.window, tokens=spent.tokens, cost=spent.micros / MICROS,
        token_limit=limit.tokens, cost_limit=limit.cost, resets_at=utc_timestamp(resets),
    )  # fmt: skip
    shares = []
    if limit.tokens:
        shares.append(spent.tokens / limit.tokens)
    if limit.cost_micros:
        shares.append(spent.micros / limit.cost_micros)
    share = max(shares, default=0.0)
    when = f"resets at {report.resets_at}"
    if share >= 1:
        return f"Budget: the agent's {limit.window} budget is spent ({when})", None, report
    if share >= config.budgets.warn_at:
        return None, f"Budget: {share:.0%} of the agent's {limit.window} budget spent ({when})", report
    return None, None, report


def _notes(probes: list[ProbeResult]) -> list[str]:
    """Notes on sources that are up, grouped by note: `Needs caller credentials: a, b`."""
    by_note: dict[str, list[str]] = {}
    for probe in probes:
        if probe.ok and probe.note:
            by_note.setdefault(probe.note, []).append(probe.source)
    return [f"{note[0].upper()}{note[1:]}: {', '.join(sources)}" for note, sources in by_note.items()]


async def _nothing() -> None:
    return None
