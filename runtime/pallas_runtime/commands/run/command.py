"""`pallas run -f FILE... [--base-port N] [--agent NAME]`: run manifests locally, no Kubernetes.

Every agent of the manifests runs in this process on its own loopback port (base+1, base+2…
in manifest order), started after the agents it depends on; the registry runs on the base
port. `secretKeyRef`s resolve from Secret manifests in the files, else from the environment
variable named by the reference's `key`.

As the original Pallas, it loads `./.env` (never overriding the environment), runs
`$PALLAS_AGENTS_CONFIG` (default `agents.yaml`) when no `-f` is given, and uses `$OPENAI_BASE_URL`
for openai providers without a `baseURL` (see `env_files`).

`spec.auth` works as in a cluster: `oidc` needs nothing more; `kubernetes` asks the API server of
the current kubeconfig (TokenReview and SubjectAccessReview with its credentials, about the
manifests' namespace). `--token`, `$PALLAS_TOKEN` or `--as-serviceaccount` give the registry a
bearer for its checks of the agents; without one it lists them as asking for a token.

`--reload` applies edits of the files while running (see `reload`); PallasTriggers are read
at start only.

PallasTriggers with a `schedule` fire on it; those with a `webhook` listen on
`--triggers-port` (default: the base port less one) at `/triggers/<namespace>/<name>`; event
triggers need a cluster (docs/triggers.md). Their runs call the agents with the same bearer as
the registry's checks (`--token`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping

from pallas_api.render import log_level, telemetry_environment
from pallas_io.commands import EXIT_FAILURE, EXIT_USAGE, port_number
from pallas_io.logs import LEVELS, log_format, setup_logging
from pallas_io.tracing import setup_tracing
from pallas_io.triggers.runs import TriggerTarget
from pallas_runtime.commands.credentials import CredentialsError, add_token_arguments, bearer_token
from pallas_runtime.commands.run.banner import StartupReport
from pallas_runtime.commands.run.env_files import manifest_files, with_openai_base_url, working_directory_env
from pallas_runtime.commands.run.hosted import LocalRun, StartFailed
from pallas_runtime.commands.run.manifests import (
    LOOPBACK,
    LocalPlan,
    ManifestError,
    Manifests,
    load_manifests,
    plan_local,
)
from pallas_runtime.commands.run.reload import Reload, watch
from pallas_runtime.commands.run.triggers import TriggerReload, plan_triggers
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.triggers.host import TriggerHost
from pallas_runtime.triggers.webhook import WebhookTrigger

log = logging.getLogger("pallas.run")
DEFAULT_BASE_PORT = 24200
RUN_TOKEN_LIFETIME = 86400
"""Seconds a minted --as-serviceaccount token lasts: a local run often lasts a working day."""
RUN_SERVICE_NAME = "pallas-run"
"""The `service.name` of the spans of `pallas run` (its agents are one process; each span names its
agent in `gen_ai.agent.name`)."""


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
        parser.add_argument(
            "--triggers-port",
            type=port_number,
            help="port of the webhook triggers' endpoint (default: --base-port less one)",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="watch the manifest files and apply edits: restart only the agents whose config changed",
        )
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
        launch_environ = dict(os.environ)
        try:
            files = manifest_files(args.file, launch_environ)
            manifests = load_manifests(files)
            plan = with_openai_base_url(
                plan_local(manifests, args.base_port, args.agent, environ=launch_environ),
                launch_environ,
            )
            plan_triggers(manifests, plan.agents, launch_environ, {})  # refuse bad triggers before starting
        except ManifestError as exc:
            print(f"pallas run: {exc}", file=sys.stderr)
            return EXIT_USAGE
        secrets = {b.env for a in plan.agents for b in a.rendered.secrets}
        merged_env = {k: v for a in plan.agents for k, v in a.environ.items()}
        for bridge in plan.bridges:  # the stdio servers' Secret values stay out of the logs too
            secrets.update(bridge.secrets)
            merged_env.update(bridge.secrets)
        try:
            # On a workstation the rotating file is on, as the original's (`PALLAS_LOG_FILE=off`).
            setup_logging(with_log_level(plan, merged_env), secret_env=secrets, file_by_default=True)
            for name, value in local_telemetry_env(plan).items():
                os.environ.setdefault(name, value)  # the SDK reads its settings from here
            setup_tracing(RUN_SERVICE_NAME)
        except ValueError as exc:
            print(f"pallas run: {exc}", file=sys.stderr)
            return EXIT_USAGE
        for bridge in plan.bridges:
            for ref in bridge.unresolved:
                key = ref.rsplit("/", 1)[1]
                log.warning(
                    "stdio server %s: %s has no value (no such Secret manifest key and $%s is unset)",
                    bridge.name,
                    ref,
                    key,
                )
        for agent in plan.agents:
            if (warning := agent.rendered.warning) is not None:
                log.warning("%s", warning.message, extra={"agent": agent.manifest.name})
            for ref in agent.unresolved:
                key = ref.rsplit("/", 1)[1]
                log.warning(
                    "%s has no value (no such Secret manifest key and $%s is unset)",
                    ref,
                    key,
                    extra={"agent": agent.manifest.name},
                )
        reload = Reload(files, args.base_port, args.agent, launch_environ) if args.reload else None
        return asyncio.run(_run(plan, args, reload, manifests, launch_environ))


def local_telemetry_env(plan: LocalPlan) -> dict[str, str]:
    """The `OTEL_*` variables of the first deployment with `spec.telemetry.endpoint` (one process).

    The process environment's own `OTEL_*` variables win over them.
    """
    for agent in plan.agents:
        telemetry = agent.deployment.spec.telemetry
        if telemetry.endpoint is not None:
            return telemetry_environment(
                telemetry, service=RUN_SERVICE_NAME, namespace="", deployment=agent.deployment.name
            )
    return {}


def with_log_level(plan: LocalPlan, environ: Mapping[str, str]) -> dict[str, str]:
    """`$PALLAS_LOG_LEVEL` wins; else the most verbose `logLevel` of the agents run (one process)."""
    if environ.get("PALLAS_LOG_LEVEL") or not plan.agents:
        return dict(environ)
    levels = (log_level(a.deployment.spec, a.manifest.spec).upper() for a in plan.agents)
    return {**environ, "PALLAS_LOG_LEVEL": min(levels, key=LEVELS.index)}


async def _run(
    plan: LocalPlan,
    args: argparse.Namespace,
    reload: Reload | None,
    manifests: Manifests,
    environ: Mapping[str, str],
) -> int:
    try:
        token = await bearer_token(args, os.environ, lifetime=RUN_TOKEN_LIFETIME)
    except CredentialsError as exc:
        print(f"pallas run: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.usage else EXIT_FAILURE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    schedules, webhooks = plan_triggers(manifests, plan.agents, environ, headers)
    triggers_port = args.triggers_port if args.triggers_port is not None else args.base_port - 1
    return await serve_plan(plan, headers, reload, triggers=(schedules, webhooks, triggers_port))


TriggerPlan = tuple[list[TriggerTarget], list[WebhookTrigger], int]
"""The schedule triggers, the webhook triggers and the webhook listener's port."""


async def serve_plan(
    plan: LocalPlan,
    probe_headers: Mapping[str, str] | None = None,
    reload: Reload | None = None,
    triggers: TriggerPlan | None = None,
) -> int:
    """Start every agent in dependency order and serve until SIGINT/SIGTERM; stop them all.

    Stopping drains each agent (docs/runtime.md: turns in flight finish within its
    `drainSeconds`); a second SIGINT/SIGTERM interrupts what is left at once. With `reload`, edits
    of its files are applied while serving (see `reload.watch`).
    """
    metrics = RuntimeMetrics()
    run = LocalRun(plan, metrics, probe_headers or {})
    host = TriggerHost(triggers[0], triggers[1], metrics) if triggers else None
    stop = asyncio.Event()
    report = StartupReport(table=log_format() == "console")
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        for bridge in plan.bridges:
            try:
                await run.start_bridge(bridge)
            except StartFailed as exc:
                print(f"pallas run: {exc}", file=sys.stderr)
                return EXIT_FAILURE
            report.started("stdio server", bridge.name, bridge.url)
        for agent in plan.agents:
            config = agent.rendered.config
            try:
                await run.start_agent(agent)
            except StartFailed as exc:
                print(f"pallas run: {exc}", file=sys.stderr)
                return EXIT_FAILURE
            report.started("agent", config.name, agent.url)
        # The registry last, not first as seed R step 3 has it: its provider checks would run
        # while the agents' start holds this one event loop and time out (docs/architecture.md, D10).
        if plan.registry_port is not None:
            try:
                await run.start_registry(plan.agents, plan.registry_port, plan)
            except StartFailed as exc:
                print(f"pallas run: {exc}", file=sys.stderr)
                return EXIT_FAILURE
            report.started(
                "registry", "", f"http://{LOOPBACK}:{plan.registry_port}/.well-known/mcp/server.json"
            )
        if host is not None and triggers is not None:
            try:
                webhook_url = await host.start(LOOPBACK, triggers[2])
            except OSError as exc:
                print(f"pallas run: triggers: {exc} (try another --triggers-port)", file=sys.stderr)
                return EXIT_FAILURE
            if webhook_url is not None:
                report.started("triggers", "", webhook_url)
            if count := len(host.engines()):
                log.info("running %d trigger(s)", count)
        await report.ready(probe_headers or {})
        log.info("running %d agent(s); stop with Ctrl-C", len(plan.agents))
        waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(run.ended.wait())]
        moves = TriggerReload(host, reload.environ, probe_headers or {}) if host and reload else None
        watcher = asyncio.create_task(watch(run, reload, stop, moves)) if reload is not None else None
        await asyncio.wait([*waiters, *([watcher] if watcher else [])], return_when=asyncio.FIRST_COMPLETED)
        stop.set()  # the watcher's stop event: it ends within its 50 ms step
        for waiter in waiters:
            waiter.cancel()
        if watcher is not None and (failure := (await asyncio.gather(watcher, return_exceptions=True))[0]):
            log.error("watching the manifests failed: %s", failure)
            return EXIT_FAILURE
        return 0
    finally:
        if host is not None:  # before the agents: a run in flight is interrupted, not left hanging
            await host.close()
        # Stopping drains every agent (its turns in flight finish); a second signal cuts that short.
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, run.hurry)
        if running := run.turns_in_flight():
            longest = max(a.rendered.config.drain_seconds for a in run.plan.agents)
            log.info(
                "stopping: waiting up to %ds for %d turn(s) in flight to finish; Ctrl-C again to "
                "interrupt them (each is kept as a failed turn)", longest, running,
            )  # fmt: skip
        await run.close()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
