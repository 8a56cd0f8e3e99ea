"""`pallas run -f FILE... [--base-port N] [--agent NAME]`: run manifests locally, no Kubernetes.

Every agent of the manifests runs in this process on its own loopback port (base+1, base+2…
in manifest order), started after the agents it depends on; the registry runs on the base
port. `secretKeyRef`s resolve from Secret manifests in the files, else from the environment
variable named by the reference's `key`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from pallas_runtime.commands.serving import (
    EmbeddedServer,
    agent_app,
    embedded_server,
    listen,
    wait_started,
)
from pallas_runtime.log import setup_logging
from pallas_runtime.manifests import LOOPBACK, LocalPlan, ManifestError, load_manifests, plan_local
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server import build_server

log = logging.getLogger("pallas.run")
DEFAULT_BASE_PORT = 24200


class RunCommand:
    help = "run PallasDeployment/PallasAgent manifests locally, without Kubernetes"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "-f",
            "--file",
            action="append",
            required=True,
            metavar="FILE",
            help="manifest file (repeatable; multi-document YAML)",
        )
        parser.add_argument(
            "--base-port",
            type=int,
            default=DEFAULT_BASE_PORT,
            help=f"registry port; agents get the next ports (default {DEFAULT_BASE_PORT})",
        )
        parser.add_argument("--agent", metavar="NAME", help="run only this agent, without a registry")

    def run(self, args: argparse.Namespace) -> int:
        if not 0 < args.base_port < 65536:
            print(f"pallas run: --base-port {args.base_port} is not a TCP port number", file=sys.stderr)
            return 2
        try:
            plan = plan_local(load_manifests(args.file), args.base_port, args.agent)
        except ManifestError as exc:
            print(f"pallas run: {exc}", file=sys.stderr)
            return 2
        for agent in plan.agents:
            for ref in agent.unresolved:
                key = ref.rsplit("/", 1)[1]
                print(
                    f"pallas run: warning: agent {agent.manifest.name}: {ref} has no value "
                    f"(no such Secret manifest key and ${key} is unset)",
                    file=sys.stderr,
                )
        secrets = {b.env for a in plan.agents for b in a.rendered.secrets}
        merged_env = {k: v for a in plan.agents for k, v in a.environ.items()}
        try:
            setup_logging(merged_env, secret_env=secrets)
        except ValueError as exc:
            print(f"pallas run: {exc}", file=sys.stderr)
            return 2
        return asyncio.run(serve_plan(plan))


async def serve_plan(plan: LocalPlan) -> int:
    """Start every agent in dependency order and serve until SIGINT/SIGTERM; stop them all."""
    metrics = RuntimeMetrics()
    servers: list[tuple[EmbeddedServer, asyncio.Task[None]]] = []
    servers_extra: list[asyncio.Task[None]] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        for agent in plan.agents:
            config = agent.rendered.config
            try:
                sock = listen(LOOPBACK, agent.port)
            except OSError as exc:
                print(
                    f"pallas run: agent {config.name}: cannot listen on {LOOPBACK}:{agent.port}: "
                    f"{exc.strerror} (try another --base-port)",
                    file=sys.stderr,
                )
                return 1
            app = agent_app(build_server(config, metrics=metrics, environ=agent.environ))
            server = embedded_server(app, LOOPBACK, agent.port)
            task = asyncio.create_task(server.serve(sockets=[sock]))
            servers.append((server, task))
            await wait_started(server, task)
            print(f"agent {config.name:<24} {agent.url}", flush=True)
        if plan.registry_port is not None:
            listening = asyncio.Event()
            registry = asyncio.create_task(_serve_registry(plan, plan.registry_port, listening))
            if not await _registry_started(registry, listening, plan.registry_port):
                return 1
            servers_extra.append(registry)
            print(
                f"registry {'':<21} http://{LOOPBACK}:{plan.registry_port}/.well-known/mcp/server.json",
                flush=True,
            )
        log.info("running %d agent(s); stop with Ctrl-C", len(plan.agents))
        waiters = [asyncio.create_task(stop.wait()), *(task for _, task in servers), *servers_extra]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        waiters[0].cancel()
        return 0
    finally:
        for task in servers_extra:
            task.cancel()
        for server, _ in servers:
            server.should_exit = True
        await asyncio.gather(*servers_extra, *(task for _, task in servers), return_exceptions=True)
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


async def _serve_registry(plan: LocalPlan, port: int, listening: asyncio.Event) -> None:
    # Imported here: the registry pulls in its own dependencies, which `--agent` runs never need.
    from pallas_runtime.registry import serve_registry
    from pallas_runtime.registry.static import LocalAgent, StaticSource

    source = StaticSource(
        [
            LocalAgent(
                agent.manifest.name,
                agent.manifest.spec,
                agent.deployment.spec,
                agent.url,
                deployment_name=agent.deployment.name,
                namespace=agent.manifest.namespace,
            )
            for agent in plan.agents
        ]
    )
    await serve_registry(source, LOOPBACK, port, started=listening)


async def _registry_started(task: asyncio.Task[None], listening: asyncio.Event, port: int) -> bool:
    """Wait until the registry listens; say why in one line if it cannot."""
    waiter = asyncio.create_task(listening.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    if listening.is_set():
        return True
    waiter.cancel()
    error = None if task.cancelled() else task.exception()
    reason = getattr(error, "strerror", None) or error
    print(
        f"pallas run: registry: cannot listen on {LOOPBACK}:{port}: {reason} (try another --base-port)",
        file=sys.stderr,
    )
    return False
