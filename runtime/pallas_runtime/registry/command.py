"""`pallas registry`: what the registry pod runs (docs/api.md §2).

    pallas registry [--namespace NS] [--deployment NAME] [--port N] [--host H]

Credentials come from the pod's ServiceAccount, else the kubeconfig (`$KUBECONFIG`,
`~/.kube/config`). The namespace defaults to `$PALLAS_NAMESPACE`, else the credentials' own
namespace; the deployment to `$PALLAS_DEPLOYMENT`, else every agent of the namespace. SIGTERM
and SIGINT stop it gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from lightkube import ConfigError, KubeConfig

from pallas_runtime.log import setup_logging
from pallas_runtime.registry.kubernetes import KubernetesSource
from pallas_runtime.registry.serve import serve_registry

DEFAULT_PORT = 8080
"""The deployment's default `registry.port`."""

log = logging.getLogger("pallas.registry")


async def _serve_until_signalled(source: KubernetesSource, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(serve_registry(source, host, port))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.info("registry: stopped")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


class RegistryCommand:
    """The `pallas registry` subcommand (a `pallas.commands` entry point)."""

    help = "Serve the MCP registry of a deployment's agents, live from the Kubernetes API."

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's flags."""
        parser.add_argument(
            "--namespace",
            default=os.environ.get("PALLAS_NAMESPACE"),
            help="namespace of the agents (default: $PALLAS_NAMESPACE, else the credentials' namespace)",
        )
        parser.add_argument(
            "--deployment",
            default=os.environ.get("PALLAS_DEPLOYMENT"),
            help="publish the agents of this PallasDeployment (default: $PALLAS_DEPLOYMENT, else all)",
        )
        parser.add_argument(
            "--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})"
        )
        parser.add_argument(
            "--host",
            default=os.environ.get("PALLAS_BIND_HOST", "0.0.0.0"),
            help="interface to bind (default $PALLAS_BIND_HOST, else 0.0.0.0)",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Serve until SIGTERM/SIGINT; 1 (with one line on stderr) when it cannot start."""
        try:
            setup_logging()
        except ValueError as exc:
            print(f"pallas registry: {exc}", file=sys.stderr)
            return 2
        if not 0 <= args.port <= 65535:
            print(f"pallas registry: --port {args.port} is not a TCP port (0-65535)", file=sys.stderr)
            return 1
        try:
            config = KubeConfig.from_env()
        except ConfigError as exc:
            print(f"pallas registry: no Kubernetes credentials: {exc}", file=sys.stderr)
            return 1
        current = config.get()
        namespace = args.namespace or (current.namespace if current else "default")
        source = KubernetesSource(namespace, args.deployment, config=config)
        log.info(
            "registry: serving %s agents of namespace %s on %s:%d",
            args.deployment or "all",
            namespace,
            args.host,
            args.port,
        )
        try:
            asyncio.run(_serve_until_signalled(source, args.host, args.port))
        except OSError as exc:
            print(f"pallas registry: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
        return 0
