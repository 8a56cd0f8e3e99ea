"""`pallas registry`: what the registry pod runs (docs/api.md §2).

    pallas registry [--namespace NS] [--deployment NAME] [--port N] [--host H] [--secrets-dir DIR]
                    [--max-head-bytes N] [--max-headers N] [--head-timeout S] [--keep-alive S]

Credentials come from the pod's ServiceAccount, else the kubeconfig (`$KUBECONFIG`,
`~/.kube/config`). The namespace defaults to `$PALLAS_NAMESPACE`, else the credentials' own
namespace; the deployment to `$PALLAS_DEPLOYMENT`, else every agent of the namespace. The
deployment's provider keys (for its provider checks) are files of `--secrets-dir` (the pod's
Secret volume, read at every check, so a rotated key is checked at once), then environment
variables. SIGTERM and SIGINT stop it gracefully.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections import ChainMap
from collections.abc import Mapping

from lightkube import ConfigError, KubeConfig

from pallas_api.spec import RegistrySpec
from pallas_io.commands import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    add_http_limit_flags,
    add_listener_flags,
    http_limits,
)
from pallas_io.logs import setup_logging
from pallas_io.secrets import SecretFiles
from pallas_io.serving import bound_port, leave, listen, run_server_loop, serve, until_signalled
from pallas_io.tracing import http_server_spans, setup_tracing
from pallas_registry.app import build_app
from pallas_registry.kubernetes import KubernetesSource

PROVIDER_KEY = re.compile(r"^PALLAS_PROVIDER_[A-Z0-9_]+_API_KEY$")
DEFAULT_PORT = RegistrySpec().port
"""The deployment's default `registry.port`."""

log = logging.getLogger("pallas.registry")


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
        add_listener_flags(parser, default_port=DEFAULT_PORT)
        parser.add_argument(
            "--secrets-dir",
            default=os.environ.get("PALLAS_SECRETS_DIR"),
            metavar="DIR",
            help="read the provider keys as files of DIR first (a pod's Secret volume; default "
            "$PALLAS_SECRETS_DIR), then from the environment",
        )
        # The operator passes the deployment's `spec.http` (docs/api.md §3 "Request limits").
        add_http_limit_flags(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Serve until SIGTERM/SIGINT; 1 (with one line on stderr) when it cannot start."""
        try:
            limits = http_limits(args)
        except ValueError as exc:
            print(f"pallas registry: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            # Provider keys given as environment variables (`pallas run`, a hand-made pod).
            redactor = setup_logging(
                fields={"namespace": args.namespace or "", "deployment": args.deployment or ""},
                secret_env=[name for name in os.environ if PROVIDER_KEY.match(name)],
            )
            setup_tracing("pallas-registry")
        except ValueError as exc:
            print(f"pallas registry: {exc}", file=sys.stderr)
            return EXIT_USAGE
        keys: Mapping[str, str] = os.environ
        if args.secrets_dir:
            files = SecretFiles(args.secrets_dir, on_read=lambda value: redactor.add([value]))
            keys = ChainMap(files, os.environ)  # type: ignore[arg-type]
        try:
            config = KubeConfig.from_env()
        except ConfigError as exc:
            print(f"pallas registry: no Kubernetes credentials: {exc}", file=sys.stderr)
            return EXIT_FAILURE
        current = config.get()
        namespace = args.namespace or (current.namespace if current else "default")
        source = KubernetesSource(namespace, args.deployment, config=config, environ=keys)
        try:
            sock = listen(args.host, args.port)
        except OSError as exc:
            print(
                f"pallas registry: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr
            )
            return EXIT_FAILURE
        log.info(
            "registry: serving %s agents of namespace %s on %s:%d",
            args.deployment or "all",
            namespace,
            args.host,
            bound_port(sock),
        )
        try:
            with sock:
                run_server_loop(
                    until_signalled(
                        serve(
                            http_server_spans(build_app(source, kubernetes_config=config)),
                            sock,
                            graceful_timeout=2,
                            limits=limits,
                        )
                    )
                )
        except OSError as exc:
            print(f"pallas registry: {exc}", file=sys.stderr)
            return EXIT_FAILURE
        log.info("registry: stopped")
        return leave(EXIT_OK)
