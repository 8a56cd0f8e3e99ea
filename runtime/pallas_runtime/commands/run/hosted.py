"""The agents and the registry `pallas run` hosts in its one process, each startable and stoppable.

An agent is its `AgentServer` served by uvicorn on its own loopback socket (bound first, so a
taken port is one clear line). Stopping it drains it as a pod drains (`AgentServer.drain`: new
sessions refused, turns in flight finishing for up to its `drainSeconds`, the rest interrupted
and kept as failed), then stops the server and closes the socket. Restarting it (`--reload`)
hands its socket to the new server at once and drains the old one beside it: new sessions go to
the new config while the old finishes its turns. The registry is served the same way from the
agents' manifests.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pallas_api.fields import HttpLimits
from pallas_io.logs import fields_context
from pallas_runtime.commands.run.manifests import (
    LOOPBACK,
    AgentKey,
    BridgeKey,
    LocalPlan,
    PlannedAgent,
    PlannedBridge,
)
from pallas_runtime.metrics import RuntimeMetrics

if TYPE_CHECKING:  # imported where used: `--agent` runs never load the registry
    from pallas_registry import RegistryMetrics
    from pallas_registry.static import LocalAgent, StaticSource
from pallas_io.serving import listen, serve
from pallas_runtime.server import AgentServer, agent_app, build_server
from pallas_runtime.stdio.bridge import Bridge
from pallas_runtime.stdio.links import ChildProcess, child_environment

GRACE_SECONDS = 2
"""How long a stopping server waits for requests still open once it is drained: answers being
written, and clients' streams, which never end by themselves (a drain closes the idle sessions'),
so a stop does not wait on them for uvicorn's default 10 s."""


class StartFailed(Exception):
    """An agent or the registry could not start; the text says which, where and why."""


@dataclass
class Hosted:
    """A server running in this process: its serving task and its socket."""

    task: asyncio.Task[None]
    sock: socket.socket

    async def stop(self) -> None:
        """Stop serving (in-flight requests get their grace period) and free the port."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.sock.close()


@dataclass
class HostedRegistry(Hosted):
    """The registry running in this process; its metric families leave the run's with it."""

    metrics: RegistryMetrics
    source: StaticSource
    limits: HttpLimits
    """Its listener's limits, fixed while it serves."""

    async def stop(self) -> None:
        """Stop serving and take the registry's families out of the agents' metrics."""
        await super().stop()
        self.metrics.leave()


@dataclass
class HostedAgent(Hosted):
    """An agent running in this process."""

    planned: PlannedAgent
    server: AgentServer
    hand_over: asyncio.Event
    """Set: stop accepting connections (a new server of the agent listens on the socket)."""


def _listen(what: str, port: int) -> socket.socket:
    try:
        return listen(LOOPBACK, port)
    except OSError as exc:
        raise StartFailed(
            f"{what}: cannot listen on {LOOPBACK}:{port}: {exc.strerror} (try another --base-port)"
        ) from None


async def _started(task: asyncio.Task[None], started: asyncio.Event, what: str, port: int) -> None:
    """Wait until a server listens.

    Raises:
        StartFailed: it stopped first.
    """
    waiter = asyncio.create_task(started.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    if started.is_set():
        return
    waiter.cancel()
    error = None if task.cancelled() else task.exception()
    raise StartFailed(f"{what} on {LOOPBACK}:{port} did not start: {error}")


async def start_agent(
    agent: PlannedAgent, metrics: RuntimeMetrics, sock: socket.socket | None = None
) -> HostedAgent:
    """Serve `agent` on its port (or on `sock`, listening already: a restart's) until stopped.

    Raises:
        StartFailed: the port is taken or the server did not start.
    """
    config = agent.rendered.config
    sock = sock or _listen(f"agent {config.name}", agent.port)
    try:
        server = build_server(config, metrics=metrics, environ=agent.environ, port=agent.port)
    except ValueError as exc:  # a conversation store that cannot be built; the text names the setting
        sock.close()
        raise StartFailed(f"agent {config.name}: {exc}") from None
    started, hand_over = asyncio.Event(), asyncio.Event()
    serving = serve(
        agent_app(server),
        sock,
        started=started,
        graceful_timeout=GRACE_SECONDS,
        drain=server.drain,
        hand_over=hand_over,
        limits=config.http,
        refused=server.refused,
    )
    # Every line logged while serving it (uvicorn's and fastmcp's too) names the agent.
    fields = fields_context(agent=config.name, deployment=agent.deployment.name)
    hosted = HostedAgent(asyncio.create_task(serving, context=fields), sock, agent, server, hand_over)
    try:
        await _started(hosted.task, started, f"agent {config.name}", agent.port)
    except StartFailed:
        await hosted.stop()
        raise
    return hosted


async def start_registry(
    agents: Sequence[PlannedAgent],
    port: int,
    headers: Mapping[str, str],
    plan: LocalPlan,
    metrics: RuntimeMetrics,
) -> Hosted:
    """Serve the registry of `agents` on `port` until stopped.

    `plan` gives the providers' keys (for the provider checks) and `$OPENAI_BASE_URL`; the
    registry's metric families join the agents' `metrics`, so the run is one scrape target.

    Raises:
        StartFailed: the port is taken or the server did not start.
    """
    # Imported here: the registry pulls in its own dependencies, which `--agent` runs never need.
    from pallas_registry import RegistryMetrics, build_app
    from pallas_registry.static import StaticSource

    source = StaticSource(
        local_agents(agents),
        headers=headers,
        registry_url=f"http://{LOOPBACK}:{port}/",
        provider_keys=plan.provider_keys,
        openai_base_url=plan.openai_base_url,
    )
    # One scrape target for the local deployment, as the original: the registry's families join
    # the agents' registry, so its /metrics (and every agent's) carries everything.
    sock = _listen("registry", port)
    joined = RegistryMetrics(source, registry=metrics.registry)
    app = build_app(source, metrics=joined)
    started = asyncio.Event()
    limits = strictest(agent.deployment.spec.http for agent in agents)
    task = asyncio.create_task(
        serve(app, sock, started=started, graceful_timeout=GRACE_SECONDS, limits=limits)
    )
    hosted = HostedRegistry(task, sock, joined, source, limits)
    try:
        await _started(task, started, "registry", port)
    except StartFailed:
        await hosted.stop()
        raise
    return hosted


def local_agents(agents: Sequence[PlannedAgent]) -> list[LocalAgent]:
    """The agents as the registry's static source takes them."""
    from pallas_registry.static import LocalAgent

    return [
        LocalAgent(
            agent.manifest.name,
            agent.manifest.spec,
            agent.deployment.spec,
            agent.url,
            deployment_name=agent.deployment.name,
            namespace=agent.manifest.namespace,
        )
        for agent in agents
    ]


async def start_bridge(planned: PlannedBridge) -> Hosted:
    """Serve the bridge of a stdio server on its port until stopped; its server starts with it.

    The server runs as a child process of `pallas run` (its stderr in the log under its name),
    started again with back-off when it ends; a stateful server runs a process per session.

    Raises:
        StartFailed: the port is taken or the bridge did not start.
    """
    name = planned.name
    sock = _listen(f"stdio server {name}", planned.port)
    stdio = planned.stdio
    environment = child_environment(planned.env)
    bridge = Bridge(
        name,
        lambda: ChildProcess(name, stdio.command, stdio.args, environment),
        token=lambda: planned.token,
        stateful=planned.stateful,
        limits=planned.limits,
        secrets=planned.secrets.values(),  # scrubbed from its results: the agents never knew them
    )
    started = asyncio.Event()
    fields = fields_context(server=name, deployment=planned.key[1])
    task = asyncio.create_task(
        serve(bridge.app(), sock, started=started, graceful_timeout=GRACE_SECONDS), context=fields
    )
    hosted = Hosted(task, sock)
    try:
        await _started(task, started, f"stdio server {name}", planned.port)
    except StartFailed:
        await hosted.stop()
        raise
    return hosted


def strictest(limits: Iterable[HttpLimits]) -> HttpLimits:
    """The smallest of each limit: the registry of `pallas run` may list several deployments."""
    chosen = list(limits)
    if not chosen:
        return HttpLimits()
    fields = HttpLimits.model_fields
    return HttpLimits(**{name: min(getattr(each, name) for each in chosen) for name in fields})


class LocalRun:
    """What `pallas run` hosts now: the agents of a plan and the registry listing them.

    `ended` is set when a server stops by itself (not by `stop_*`): the run is then over.
    """

    def __init__(self, plan: LocalPlan, metrics: RuntimeMetrics, probe_headers: Mapping[str, str]) -> None:
        self.plan = plan
        """The plan of the agents hosted now."""
        self.metrics = metrics
        self.probe_headers = probe_headers
        self.agents: dict[AgentKey, HostedAgent] = {}
        self.bridges: dict[BridgeKey, tuple[PlannedBridge, Hosted]] = {}
        self.registry: Hosted | None = None
        self.ended = asyncio.Event()
        self._stopping: set[asyncio.Task[None]] = set()
        self._draining: dict[asyncio.Task[None], HostedAgent] = {}
        """Agents a restart replaced, draining beside their successors."""

    def _watch(self, hosted: Hosted) -> None:
        def done(task: asyncio.Task[None]) -> None:
            if task not in self._stopping:
                self.ended.set()

        hosted.task.add_done_callback(done)

    async def _stop(self, hosted: Hosted) -> None:
        self._stopping.add(hosted.task)
        await hosted.stop()
        self._stopping.discard(hosted.task)

    def ports(self) -> dict[AgentKey, int]:
        """The port of every hosted agent."""
        return {key: hosted.planned.port for key, hosted in self.agents.items()}

    async def start_agent(self, agent: PlannedAgent, sock: socket.socket | None = None) -> None:
        """Host `agent` (see `start_agent`)."""
        hosted = await start_agent(agent, self.metrics, sock)
        self.agents[agent.manifest.namespace, agent.manifest.name] = hosted
        self._watch(hosted)

    async def restart_agent(self, agent: PlannedAgent) -> None:
        """Replace the hosted agent of `agent`'s key by `agent`, without a moment of refusals.

        On the same port the old server hands its socket over: the new one accepts from now on
        (connections arriving while it starts wait in the socket's backlog), and the old one
        drains beside it in the background, its open sessions finishing their turns. On another
        port the old one is stopped first.

        Raises:
            StartFailed: the new server did not start (the old one is draining or stopped).
        """
        key = (agent.manifest.namespace, agent.manifest.name)
        old = self.agents.pop(key, None)
        if old is None or old.planned.port != agent.port:
            if old is not None:
                await self._stop(old)
            await self.start_agent(agent)
            return
        old.hand_over.set()
        successor = old.sock.dup()  # the old server's own copy closes when it stops
        draining = asyncio.create_task(self._stop(old), name=f"draining {agent.manifest.name}")
        self._draining[draining] = old
        draining.add_done_callback(lambda task: self._draining.pop(task, None))
        await self.start_agent(agent, successor)

    def hurry(self) -> None:
        """Interrupt now the turns every draining agent waits for (a second Ctrl-C)."""
        for hosted in [*self.agents.values(), *self._draining.values()]:
            hosted.server.hurry()

    def turns_in_flight(self) -> int:
        """send_message calls running in every hosted agent."""
        return sum(hosted.server.inflight.count for hosted in self.agents.values())

    def apply_agent(self, agent: PlannedAgent) -> bool:
        """Hand a running agent its new config and environment, applied from its next turn.

        Returns:
            False, with nothing changed, when the agent is not hosted or needs a restart for it.
        """
        hosted = self.agents.get((agent.manifest.namespace, agent.manifest.name))
        if hosted is None or not hosted.server.live.apply(agent.rendered.config, secrets=agent.environ):
            return False
        hosted.planned = agent
        return True

    async def stop_agent(self, key: AgentKey) -> None:
        """Stop the agent `key`, if hosted."""
        hosted = self.agents.pop(key, None)
        if hosted is not None:
            await self._stop(hosted)

    def bridge_ports(self) -> dict[BridgeKey, int]:
        """The port of every hosted bridge."""
        return {key: planned.port for key, (planned, _) in self.bridges.items()}

    async def start_bridge(self, bridge: PlannedBridge) -> None:
        """Host the bridge of a stdio server (see `start_bridge`)."""
        hosted = await start_bridge(bridge)
        self.bridges[bridge.key] = (bridge, hosted)
        self._watch(hosted)

    async def stop_bridge(self, key: BridgeKey) -> None:
        """Stop a bridge and its server(s), if hosted."""
        entry = self.bridges.pop(key, None)
        if entry is not None:
            await self._stop(entry[1])

    async def start_registry(self, agents: Sequence[PlannedAgent], port: int, plan: LocalPlan) -> None:
        """Host the registry of `agents` (see `start_registry`)."""
        self.registry = await start_registry(agents, port, self.probe_headers, plan, self.metrics)
        self._watch(self.registry)

    def update_registry(self, agents: Sequence[PlannedAgent], plan: LocalPlan) -> bool:
        """List `agents` in the running registry, in place: its MCP sessions (the fleet) go on.

        Returns:
            False, with nothing changed, when no registry runs or its listener's limits would
            change (a restart is needed then).
        """
        registry = self.registry
        limits = strictest(agent.deployment.spec.http for agent in agents)
        if not isinstance(registry, HostedRegistry) or registry.limits != limits:
            return False
        registry.source.update(local_agents(agents), plan.provider_keys)
        return True

    async def stop_registry(self) -> None:
        """Stop the registry, if hosted."""
        registry, self.registry = self.registry, None
        if registry is not None:
            await self._stop(registry)

    async def close(self) -> None:
        """Stop everything: the registry, then every agent at once (each drains), then the stdio servers.

        The agents a restart left draining are waited for too.
        """
        await self.stop_registry()
        agents, self.agents = list(self.agents.values()), {}
        await asyncio.gather(*(self._stop(hosted) for hosted in agents), *self._draining)
        bridges, self.bridges = [hosted for _, hosted in self.bridges.values()], {}
        await asyncio.gather(*(self._stop(hosted) for hosted in bridges))
