"""`pallas operator`: the command registered under the `pallas.commands` entry point."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from pydantic import ValidationError

from pallas_api.spec import DEFAULT_NODE_FAILURE_SECONDS, TelemetrySpec
from pallas_api.triggers.event import EventKind
from pallas_api.validation import describe
from pallas_io.commands import EXIT_USAGE, add_http_limit_flags, http_limits, port_number
from pallas_io.logs import setup_logging
from pallas_io.tracing import setup_tracing
from pallas_operator import DEFAULT_RUNTIME_IMAGE
from pallas_operator.service_resolver import ServiceResolver
from pallas_operator.settings import OperatorSettings


def label_map(text: str) -> dict[str, str]:
    """`k=v,k2=v2` → a dict; an entry without `=` is a usage error naming it."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"{item!r} is not KEY=VALUE")
        labels[key] = value
    return labels


def default_telemetry(text: str) -> TelemetrySpec:
    """`--default-telemetry`: a `spec.telemetry` object as JSON, checked as the CRD checks it."""
    try:
        return TelemetrySpec.model_validate_json(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(describe(exc, prefix="telemetry", limit=1)) from None


def toleration_seconds(text: str) -> int:
    """`--node-failure-toleration-seconds`: whole seconds, 0 to 3600 (what the CRD field takes)."""
    try:
        seconds = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if not 0 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{seconds} is outside 0 to 3600")
    return seconds


def event_kind(text: str) -> EventKind:
    """`--event-kind`: `[apiGroup/]resource`, e.g. `pods` or `apps/deployments`."""
    try:
        return EventKind.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class OperatorCommand:
    """Run the operator against the current kubeconfig or in-cluster credentials."""

    help = "run the Kubernetes operator (watches PallasDeployments and PallasAgents)"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the operator's flags."""
        parser.add_argument(
            "--namespace", "-n", action="append", default=[], metavar="NS",
            help="watch this namespace (repeatable); default: all namespaces",
        )  # fmt: skip
        parser.add_argument(
            "--all-namespaces", "-A", action="store_true", help="watch every namespace (default)"
        )
        parser.add_argument(
            "--runtime-image",
            default=os.environ.get("PALLAS_RUNTIME_IMAGE", DEFAULT_RUNTIME_IMAGE),
            help="image of agent and registry pods (env PALLAS_RUNTIME_IMAGE; default %(default)s)",
        )
        parser.add_argument(
            "--default-telemetry",
            type=default_telemetry,
            default=TelemetrySpec(),
            metavar="JSON",
            help="spec.telemetry of the PallasDeployments that name no endpoint, as JSON "
            '(e.g. \'{"endpoint": "http://collector:4318"}\'; the chart\'s telemetry values)',
        )
        parser.add_argument(
            "--node-failure-toleration-seconds",
            type=toleration_seconds,
            default=DEFAULT_NODE_FAILURE_SECONDS,
            metavar="S",
            help="seconds agent and registry pods stay on a node that stopped reporting before "
            "they are evicted, unless a PallasDeployment's spec.runtime.nodeFailureTolerationSeconds "
            "says (default %(default)s; Kubernetes' own is 300)",
        )
        parser.add_argument(
            "--event-kind",
            type=event_kind,
            action="append",
            default=[],
            metavar="[GROUP/]RESOURCE",
            help="a kind PallasTriggers may watch for events (repeatable; e.g. pods, apps/deployments; "
            "the chart's triggers.eventKinds, which also grants list and watch on it)",
        )
        parser.add_argument(
            "--http-port",
            type=port_number,
            default=8080,
            help="port of /healthz, /readyz and /metrics (default 8080; 0: any free port)",
        )
        add_http_limit_flags(parser)  # of the --http-port listener
        parser.add_argument(
            "--lease-namespace",
            default=os.environ.get("POD_NAMESPACE", "default"),
            help="namespace of the leader-election Lease (env POD_NAMESPACE; default %(default)s)",
        )
        parser.add_argument(
            "--service-host-map", type=Path, metavar="FILE",
            help="HOST[:PORT]=HOST[:PORT] lines mapping agent Service addresses to reachable ones",
        )  # fmt: skip
        parser.add_argument(
            "--pod-namespace",
            default=os.environ.get("POD_NAMESPACE"),
            help="namespace of the operator's pods, admitted by agents' NetworkPolicies (env POD_NAMESPACE)",
        )
        parser.add_argument(
            "--pod-labels",
            type=label_map,
            default={},
            metavar="K=V,...",
            help="labels selecting the operator's pods, admitted by agents' NetworkPolicies",
        )
        parser.add_argument("--verbose", "-v", action="store_true", help="log at debug level")

    def run(self, args: argparse.Namespace) -> int:
        """Run until SIGTERM; exit 1 if leadership is lost (the pod restarts as a standby)."""
        from pallas_operator.runner import run_operator

        environ = {**os.environ, **({"PALLAS_LOG_LEVEL": "DEBUG"} if args.verbose else {})}
        try:
            setup_logging(environ)
            setup_tracing("pallas-operator")
        except ValueError as exc:
            print(f"pallas operator: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if args.all_namespaces and args.namespace:
            print("pallas operator: --namespace and --all-namespaces exclude each other", file=sys.stderr)
            return EXIT_USAGE
        try:
            resolver = ServiceResolver.from_env(args.service_host_map)
            limits = http_limits(args)
        except ValueError as exc:
            print(f"pallas operator: {exc}", file=sys.stderr)
            return EXIT_USAGE
        settings = OperatorSettings(
            namespaces=tuple(args.namespace),
            runtime_image=args.runtime_image,
            resolver=resolver,
            http_port=args.http_port,
            http_limits=limits,
            lease_namespace=args.lease_namespace,
            pod_namespace=args.pod_namespace or None,
            pod_labels=args.pod_labels,
            default_telemetry=args.default_telemetry,
            node_failure_toleration_seconds=args.node_failure_toleration_seconds,
            event_kinds=tuple(args.event_kind),
        )
        return asyncio.run(run_operator(settings))
