"""`pallas run -f FILE... [--base-port N] [--agent NAME]`: run manifests locally, no Kubernetes.

Every agent of the manifests runs in this process on its own loopback port (base+1, base+2…
in manifest order), started after the agents it depends on; the registry runs on the base
port. `secretKeyRef`s resolve from Secret manifests in the files, else from the environment
variable named by the reference's `key`.

As the original Pallas, it loads `./.env` (never overriding the environment), runs
`$PALLAS_AGENTS_CONFIG` (default `agents.yaml`) when no `-f` is given, and uses `$OPENAI_BASE_URL`
for openai providers without a `baseURL` (see `local_env`).

`spec.auth` works as in a cluster: `oidc` needs nothing more; `kubernetes` asks the API server of
the current kubeconfig (TokenReview and SubjectAccessReview with its credentials, about the
manifests' namespace). `--token`, `$PALLAS_TOKEN` or `--as-serviceaccount` give the registry a
bearer for its checks of the agents; without one it lists them as asking for a token.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping
from functools import partial

from pallas_api.commands import EXIT_FAILURE, EXIT_USAGE, port_number
from pallas_api.logs import setup_logging
from pallas_runtime.commands.credentials import CredentialsError, add_token_arguments, bearer_token
from pallas_runtime.commands.local_env import manifest_files, with_openai_base_url, working_directory_env
from pallas_runtime.manifests import LOOPBACK, LocalPlan, ManifestError, load_manifests, plan_local
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server import agent_app, build_server, stop_turns
from pallas_runtime.serving import listen, serve

log = logging.getLogger("pallas.run")
DEFAULT_BASE_PORT = 24200
RUN_TOKEN_LIFETIME = 86400
"""Seconds a minted --as-serviceaccount token lasts: a local run often lasts a working day."""


class RunCommand:
    """The `pallas run` subcommand (a `pallas.commands` entry point)."""

    help = "run PallasDeployment/PallasAgent manifests locally, without Kubernetes"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's flags."""
        parser.add_argument(
            "-f",
            "--file",
            action="append",
            metavar="FILE",
            help="manifest file (repeatable; multi-document YAML); default: $PALLAS_AGENTS_CONFIG, "
            "else agents.yaml",
        )
        parser.add_argument(
            "--base-port",
            type=port_number,
            default=DEFAULT_BASE_PORT,
            help=f"registry port; agents get the next ports (default {DEFAULT_BASE_PORT})",
        )
        parser.add_argument("--agent", metavar="NAME", help="run only this agent, without a registry")
        add_token_arguments(parser, what="for the registry's checks of agents that check callers")

    def run(self, args: argparse.Namespace) -> int:
        """Run the manifests until SIGTERM/SIGINT."""
        if args.base_port == 0:  # the agents' ports follow it, so it cannot be "any free port"
            print(
                "pallas run: --base-port 0 is not allowed: agents listen on the ports after it",
                file=sys.stderr,
            )
            return EXIT_USAGE
        working_directory_env()
        try:
            files = manifest_files(args.file, os.environ)
            plan = with_openai_base_url(
                plan_local(load_manifests(files), args.base_port, args.agent), os.environ
            )
        except ManifestError as exc:
            print(f"pallas run: {exc}", file=sys.stderr)
            return EXIT_USAGE
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
            return EXIT_USAGE
        return asyncio.run(_run(plan, args))


async def _run(plan: LocalPlan, args: argparse.Namespace) -> int:
    try:
        token = await bearer_token(args, os.environ, lifetime=RUN_TOKEN_LIFETIME)
    except CredentialsError as exc:
        print(f"pallas run: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.usage else EXIT_FAILURE
    return await serve_plan(plan, {"Authorization": f"Bearer {token}"} if token else {})


async def serve_plan(plan: LocalPlan, probe_headers: Mapping[str, str] | None = None) -> int:
    """Start every agent in dependency order and serve until SIGINT/SIGTERM; stop them all."""
    metrics = RuntimeMetrics()
    tasks: list[asyncio.Task[None]] = []
    sockets: list[socket.socket] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        for agent in plan.agents:
            config = agent.rendered.config
            sock = _listen(f"agent {config.name}", agent.port)
            if sock is None:
                return EXIT_FAILURE
            sockets.append(sock)
            server = build_server(config, metrics=metrics, environ=agent.environ)
            started = asyncio.Event()
            serving = serve(agent_app(server), sock, started=started, before_stop=partial(stop_turns, server))
            tasks.append(asyncio.create_task(serving))
            if not await _started(tasks[-1], started, f"agent {config.name}", agent.port):
                return EXIT_FAILURE
            print(f"agent {config.name:<24} {agent.url}", flush=True)
        if plan.registry_port is not None:
            sock = _listen("registry", plan.registry_port)
            if sock is None:
                return EXIT_FAILURE
            sockets.append(sock)
            started = asyncio.Event()
            serving = _serve_registry(plan, sock, started, probe_headers or {}, metrics)
            tasks.append(asyncio.create_task(serving))
            if not await _started(tasks[-1], started, "registry", plan.registry_port):
                return EXIT_FAILURE
            print(
                f"registry {'':<21} http://{LOOPBACK}:{plan.registry_port}/.well-known/mcp/server.json",
                flush=True,
            )
        log.info("running %d agent(s); stop with Ctrl-C", len(plan.agents))
        waiters = [asyncio.create_task(stop.wait()), *tasks]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        waiters[0].cancel()
        return 0
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sock in sockets:
            sock.close()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def _listen(what: str, port: int) -> socket.socket | None:
    try:
        return listen(LOOPBACK, port)
    except OSError as exc:
        print(
            f"pallas run: {what}: cannot listen on {LOOPBACK}:{port}: {exc.strerror} "
            "(try another --base-port)",
            file=sys.stderr,
        )
        return None


async def _serve_registry(
    plan: LocalPlan,
    sock: socket.socket,
    started: asyncio.Event,
    headers: Mapping[str, str],
    metrics: RuntimeMetrics,
) -> None:
    # Imported here: the registry pulls in its own dependencies, which `--agent` runs never need.
    from pallas_runtime.registry import RegistryMetrics, build_app
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
        ],
        headers=headers,
        registry_url=f"http://{LOOPBACK}:{plan.registry_port}/",
        provider_keys=plan.provider_keys,
        openai_base_url=plan.openai_base_url,
    )
    # One scrape target for the local deployment, as the original: the registry's families join
    # the agents' registry, so its /metrics (and every agent's) carries everything.
    app = build_app(source, metrics=RegistryMetrics(source, registry=metrics.registry))
    await serve(app, sock, started=started, graceful_timeout=2)


async def _started(task: asyncio.Task[None], started: asyncio.Event, what: str, port: int) -> bool:
    """Wait until a server listens; say why in one line if it cannot."""
    waiter = asyncio.create_task(started.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    if started.is_set():
        return True
    waiter.cancel()
    error = None if task.cancelled() else task.exception()
    print(f"pallas run: {what} on {LOOPBACK}:{port} did not start: {error}", file=sys.stderr)
    return False
