"""`AgentServer`: one agent as an MCP server, composed from its parts, and `build_server`.

The server owns the FastMCP instance and the state its edges need: the metrics, the
send_message calls in flight (drained by `drain`), the session limits, the refusal counter
and whether it is ready or draining. The agent's config and what is built from it (provider, tools, loop)
are its `LiveAgent`'s, which swaps them between turns when the config or a secret changes
(`agent.live`); the server follows a change in what its surface says (title, description) and
in who may call (`auth.access`). Its surface is added by one part each (`send_message`, `get_health`,
`conversation_tools`, `history_prompt`, `instruction_resource`, `probe_routes`). Building it
does no I/O; the lifespan (run by the HTTP app or an in-memory `Client(server.mcp)`) starts the
provider preflight and closes the provider, store and downstream connections on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastmcp import FastMCP

from pallas_api.config import AgentConfig
from pallas_api.errors import ErrorCode
from pallas_api.fields import SessionLimits
from pallas_api.health import RELOAD_OUTCOMES
from pallas_runtime.agent.config_file import ConfigFile
from pallas_runtime.agent.health import HealthChecker
from pallas_runtime.agent.live import Generation, LiveAgent, default_parts, given_parts
from pallas_runtime.agent.turns import Conversations
from pallas_runtime.auth import build_auth
from pallas_runtime.conversations.factory import build_store
from pallas_runtime.conversations.model import ConversationStore
from pallas_runtime.conversations.tasks import task_store_for
from pallas_runtime.downstream.source import ToolSource
from pallas_runtime.edge.sessions import SessionTable
from pallas_runtime.inflight import DrainOutcome, InFlight
from pallas_runtime.llm.provider import LLMProvider
from pallas_runtime.metrics import AUTH_OUTCOMES, RuntimeMetrics
from pallas_runtime.server.conversation_gauge import ConversationGauge
from pallas_runtime.server.conversation_tools import ConversationTools
from pallas_runtime.server.deferred_a2a import DeferredA2A
from pallas_runtime.server.gateway_tools import GatewayTools
from pallas_runtime.server.get_health import HealthTool
from pallas_runtime.server.held import HeldTurns
from pallas_runtime.server.history_prompt import HistoryPrompt
from pallas_runtime.server.instruction_resource import InstructionResource
from pallas_runtime.server.probe_routes import ProbeRoutes
from pallas_runtime.server.send_message import SendMessage, SendMessageMetrics
from pallas_runtime.server.server_card import ServerCardRoute
from pallas_runtime.server.tasks import SendMessageTasks
from pallas_runtime.server.tool_errors import CodedErrors
from pallas_runtime.server.turn_entry import TurnEntry
from pallas_runtime.server.warm_up import import_what_fastmcp_defers, skip_key_value_type_checks
from pallas_runtime.spending.factory import ledger_for
from pallas_runtime.spending.guard import Budgets

if TYPE_CHECKING:
    from pallas_runtime.auth import PallasAuth
    from pallas_runtime.server.a2a import A2ASurface

log = logging.getLogger("pallas.server")
SESSION_QUIET_SECONDS = 1.0
"""A drained agent closes a session once none of its requests ran for this long (`close_all`)."""
SESSIONS_PATIENCE_SECONDS = 5.0
"""How long a drained agent spends closing its sessions (answers being written, quick requests)."""


class AgentServer:
    """One agent's MCP server. Serve it with `agent_app(server)`; test it with `Client(server.mcp)`."""

    def __init__(
        self,
        live: LiveAgent,
        *,
        metrics: RuntimeMetrics,
        store: ConversationStore,
        port: int | None = None,
    ) -> None:
        """Compose the server from its parts.

        Args:
            live: The agent's config and what is built from it, as it changes (`agent.live`).
            metrics: Where its series go (process-wide under `pallas run`).
            store: Where conversations are kept.
            port: The port it listens on, when known (`pallas_agent_info`'s `port` label).
        """
        skip_key_value_type_checks()
        config = live.config
        agent = config.name
        self.live = live
        self.metrics = metrics
        self.port = "" if port is None else str(port)
        """The `port` label of `pallas_agent_info` (seed R §metrics); empty when not known."""
        self.sessions: SessionLimits = config.sessions
        """How many MCP sessions it keeps, for how long (`sessions.SessionTable`)."""
        self.inflight = InFlight(agent)
        """Its running send_message calls (see `drain`)."""
        self.ready = False
        """The lifespan has run and not ended (`/readyz`)."""
        self.session_table: SessionTable | None = None
        """The MCP sessions of its HTTP app while it serves (`agent_app` sets it)."""
        self._store = store
        self._tasks: set[asyncio.Task[None]] = set()
        scope = config.conversation_scope
        conversations = Conversations(
            config.identity, scope, store, sessions=config.sessions.max_sessions, inflight=self.inflight,
            forget=lambda key: self.live.generation.loop.tools.release(key),
        )  # fmt: skip
        if scope == "caller" and config.auth.mode == "none":
            log.warning(
                "agent %s: conversation scope caller without inbound auth: every client continues one "
                "shared conversation (a single-user agent; docs/api.md §3)",
                agent,
            )
        self.budgets = Budgets(ledger_for(store), metrics)
        """Its budgets, their spend kept beside the conversations (`spending`)."""
        self._auth = build_auth(config, metrics)
        self._health = HealthChecker(
            live,
            metrics,
            store=store,
            access_problem=self._auth.verifier.problem if self._auth else None,
            in_flight=lambda: self.inflight.count,
            spend=lambda config: self.budgets.spent(config),
        )
        self._gauge = ConversationGauge(agent, store, metrics)
        self.turns = TurnEntry(live, conversations, self.inflight, self._gauge, metrics, self.budgets)
        """Where every turn starts, whichever protocol asked for it."""
        self.held = HeldTurns(
            config.identity, task_store_for(store), ttl_seconds=config.conversations.task_ttl_seconds
        )
        """Turns that outlive their request: MCP tasks and approvals over MRTR (`server.held`)."""
        self._send = SendMessage(live, self.turns, verified=self._auth is not None, held=self.held)
        self.a2a: DeferredA2A | None = None
        """The A2A surface (`spec.a2a.enabled`, fixed at start), served beside MCP by `agent_app`;
        its SDK (~28 MB) is imported after ready, and never by an agent without A2A."""
        if config.a2a.enabled:
            self.a2a = DeferredA2A(functools.partial(_a2a_surface, live, self.turns, metrics, self._auth))
        self._declare_series()
        self.mcp = FastMCP(
            agent,
            instructions=config.description or None,
            version=config.version,
            lifespan=self._lifespan,
            middleware=[SendMessageMetrics(agent, metrics, self._send.names), CodedErrors()],
            mask_error_details=True,
            auth=self._auth,
        )
        self._conversations = conversations
        self._instruction = InstructionResource(lambda: self.live.config)
        self._send.add_to(self.mcp)
        self.mcp.add_extension(SendMessageTasks(self.held, lambda: self._send.names))
        HealthTool(self._health).add_to(self.mcp)
        HistoryPrompt(config, conversations).add_to(self.mcp)
        ConversationTools(config, conversations, self._gauge).add_to(self.mcp)
        self._instruction.add_to(self.mcp)
        ProbeRoutes(lambda: self.ready, lambda: self.draining, metrics).add_to(self.mcp)
        ServerCardRoute(lambda: self.live.config).add_to(self.mcp)
        if config.tool_exposure.gateway:
            # Offered or not is fixed at start, like the rest of the surface (`needs_new_process`).
            GatewayTools(live, self.inflight, verified=self._auth is not None).add_to(self.mcp)
        live.listen(self._changed)

    @property
    def config(self) -> AgentConfig:
        """The config new turns run with."""
        return self.live.config

    def _changed(self, old: Generation, new: Generation) -> None:
        """A new generation: what the MCP surface says about the agent, and who may call it."""
        before, after = old.config, new.config
        if (before.title, before.description) != (after.title, after.description):
            self.mcp.instructions = after.description or None
            self._send.add_to(self.mcp)
            HistoryPrompt(after, self._conversations).add_to(self.mcp)
            self._instruction.add_to(self.mcp)
        if self._auth is not None and before.auth.access != after.auth.access:
            self._auth.verifier.admit(after.auth.access)
        if before.model != after.model:
            self.metrics.agent_info.labels(after.name, after.model, self.port).set(1)
            with contextlib.suppress(KeyError):
                self.metrics.agent_info.remove(before.name, before.model, self.port)
        if before.provider != after.provider or before.model != after.model:
            task = asyncio.create_task(self._preflight())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _declare_series(self) -> None:
        agent, metrics, inflight = self.config.name, self.metrics, self.inflight
        metrics.agent_info.labels(agent, self.config.model, self.port).set(1)
        metrics.active_conversations.labels(agent).set(0)
        # The process-wide registry keeps this function: it holds the tracker, not the server
        # (`pallas run --reload` drops the servers of agents it removes).
        metrics.send_message_in_flight.labels(agent).set_function(lambda: inflight.count)
        # Both outcome series exist from the start, so rate() sees the first error of a new agent.
        for outcome in ("ok", "error"):
            metrics.send_message_total.labels(agent, outcome)
        for decision in AUTH_OUTCOMES:  # open agents too: 0 says nobody was refused
            metrics.auth_requests_total.labels(agent, decision)
        metrics.llm_cost_total.labels(agent, self.config.model)
        for outcome in RELOAD_OUTCOMES:  # 0 says no reload was tried
            metrics.config_reloads_total.labels(agent, outcome)
        for budget in ("agent", "caller", "chain"):  # 0 says no turn was refused for its budget
            metrics.budget_exceeded_total.labels(agent, budget)

    def refused(self, reason: str) -> None:
        """Count a request refused at the server's edge (`pallas_requests_refused_total`).

        The reasons are its listener's (a head too large or too slow, `serving.serve(refused=…)`)
        and its app's (`agent_app`).
        """
        self.metrics.requests_refused.labels(self.config.name, reason).inc()

    @property
    def draining(self) -> bool:
        """It is stopping: not ready, new sessions refused, turns in flight finishing."""
        return self.inflight.draining

    async def drain(self, seconds: float | None = None) -> DrainOutcome:
        """Stop taking new sessions and let turns in flight finish; interrupt those left.

        Turns get at most `seconds` (by default `drainSeconds`); those still running are
        interrupted and kept as failed; then the idle sessions are closed. While it runs
        `/readyz` answers 503 and the edge refuses new MCP sessions with 503 and a retryable
        error; requests of open sessions are still served (`docs/runtime.md`).
        """
        seconds = self.config.drain_seconds if seconds is None else seconds
        running = self.inflight.count
        log.info(
            "stopping: new MCP sessions are refused; %d send_message call(s) in flight may finish "
            "within %gs (drainSeconds)", running, seconds, extra={"agent": self.config.name},
        )  # fmt: skip
        outcome = await self.inflight.drain(seconds)
        level = logging.WARNING if outcome.interrupted else logging.INFO
        log.log(
            level,
            "drained in %.1fs: %d call(s) finished, %d interrupted (kept as failed turns: %s)",
            outcome.seconds, outcome.finished, outcome.interrupted, ErrorCode.AGENT_SHUTTING_DOWN.value,
            extra={"agent": self.config.name},
        )  # fmt: skip
        if self.session_table is not None:
            # Their standing streams would keep the server waiting; their clients open new ones.
            await self.session_table.close_all(SESSION_QUIET_SECONDS, SESSIONS_PATIENCE_SECONDS)
        return outcome

    def keep_session_table(self, table: SessionTable | None) -> None:
        """The HTTP app's session table while it serves (None after); see `agent_app`."""
        self.session_table = table

    def hurry(self) -> None:
        """Interrupt the turns a drain waits for now (a second Ctrl-C)."""
        self.inflight.hurry()

    async def _preflight(self) -> None:
        check = await self._health.check_provider()
        if not check.ok:  # warn-only: the agent serves, get_health reports it
            log.warning("LLM provider preflight failed: %s", check.message)

    @asynccontextmanager
    async def _lifespan(self, _: FastMCP) -> AsyncIterator[dict[str, Any]]:
        await self._store.start()
        tasks = [asyncio.create_task(self._gauge.keep())]
        try:
            await asyncio.to_thread(import_what_fastmcp_defers)
            self.ready = True
            # After ready: the preflight loads the provider's SDK (`llm.deferred`), which no
            # request but a turn needs; a turn that comes first waits for that same load.
            tasks.append(asyncio.create_task(self._preflight()))
            if self.a2a is not None:
                tasks.append(asyncio.create_task(self.a2a.load()))
            yield {}
        finally:
            self.ready = False
            tasks.extend(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.held.aclose()  # before the store: a cancelled task writes its end there
            closing = [self.live.aclose(), self._store.aclose()]
            if self.a2a is not None:
                closing.append(self.a2a.aclose())
            if self._auth is not None:
                closing.append(self._auth.verifier.aclose())
            await asyncio.gather(*closing, return_exceptions=True)


def _a2a_surface(
    live: LiveAgent, turns: TurnEntry, metrics: RuntimeMetrics, auth: PallasAuth | None
) -> A2ASurface:
    # Imported only here, after the SDK's module was imported in a thread (`DeferredA2A.load`).
    from pallas_runtime.server.a2a import A2ASurface

    return A2ASurface(live, turns, metrics, auth)


def build_server(
    config: AgentConfig,
    *,
    metrics: RuntimeMetrics | None = None,
    provider: LLMProvider | None = None,
    sources: Sequence[ToolSource] | None = None,
    environ: Mapping[str, str] | None = None,
    store: ConversationStore | None = None,
    config_file: ConfigFile | None = None,
    config_hash: str | None = None,
    on_secrets: Callable[[Iterable[str]], None] | None = None,
    port: int | None = None,
) -> AgentServer:
    """The agent's server, with the parts not given built from `config` and the environment.

    Parts can be passed in, which is how `pallas run` shares one metrics registry among its
    agents and how tests and benchmarks put fakes in place (a part given stays, whatever the
    config says later).

    Args:
        config: The agent's configuration at start.
        metrics: Process-wide metrics; a new registry by default.
        provider: The LLM provider; built from config and secrets by default (and again when
            they change).
        sources: Downstream servers and peer agents; built from config by default.
        environ: Where secret values are looked up, at start and at every turn (the process
            environment by default; a pod's Secret volume, `pallas_io.secrets.SecretFiles`).
        store: Where conversations are kept; built from `config.conversations` by default.
        config_file: The file `config` was read from, read again when it changes (a pod).
        config_hash: The hash of `config`'s text as read; computed from `config` if None.
        on_secrets: Told each secret value seen, at start and after a rotation (log redaction).
        port: The port it listens on (`pallas_agent_info`'s `port`), when known.

    Raises:
        ValueError: the conversation store cannot be built (the message names the setting).
    """
    metrics = metrics or RuntimeMetrics()
    secrets = os.environ if environ is None else environ
    parts = default_parts if provider is None and sources is None else given_parts(provider, sources)
    live = LiveAgent(
        config,
        metrics=metrics,
        secrets=secrets,
        parts=parts,
        config_hash=config_hash,
        source=config_file,
        on_secrets=on_secrets,
    )
    return AgentServer(live, metrics=metrics, store=store or build_store(config, environ), port=port)
