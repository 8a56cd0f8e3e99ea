"""The operator's settings, from `pallas operator` flags and environment variables."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from pallas_api.fields import HttpLimits
from pallas_api.spec import DEFAULT_NODE_FAILURE_SECONDS, TelemetrySpec
from pallas_api.triggers.event import EventKind
from pallas_operator import DEFAULT_RUNTIME_IMAGE
from pallas_operator.service_resolver import ServiceResolver


def _default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class OperatorSettings:
    """Everything a running operator is told."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means all namespaces."""
    runtime_image: str = DEFAULT_RUNTIME_IMAGE
    """Image of agent and registry pods unless a deployment's spec.runtime.image says otherwise."""
    resolver: ServiceResolver = field(default_factory=ServiceResolver)
    """Maps agent Service URLs to where the operator can reach them (see `services`)."""
    http_host: str = field(default_factory=lambda: os.environ.get("PALLAS_BIND_HOST", "0.0.0.0"))
    """Bind address of the HTTP server (a node running several pods on one host sets it)."""
    http_port: int | None = 8080
    """Port of /healthz, /readyz and /metrics; None for no HTTP server, 0 for any free port."""
    http_limits: HttpLimits = field(default_factory=HttpLimits)
    """Bounds on the requests that port reads (the chart's `metrics.limits`)."""
    lease_name: str = "pallas-operator"
    lease_namespace: str = field(default_factory=lambda: os.environ.get("POD_NAMESPACE", "default"))
    identity: str = field(default_factory=_default_identity)
    lease_duration: float = 30.0
    lease_renew_every: float = 10.0
    lease_retry_every: float = 2.0
    workers: int = 8
    """Concurrent reconciles."""
    verify_timeout: float = 10.0
    """Budget of one MCP verification (initialize + tools/list)."""
    stall_after: float = 30.0
    """Seconds of unfinished initial indexing after which (and every as many after) a warning says so."""
    monitoring_recheck: float = 60.0
    """Seconds until a deployment wanting ServiceMonitors looks again for their missing CRD."""
    pod_namespace: str | None = field(default_factory=lambda: os.environ.get("POD_NAMESPACE") or None)
    """Where the operator's own pods run (NetworkPolicies admit its probes from there); None
    when it runs outside the cluster."""
    pod_labels: dict[str, str] = field(default_factory=dict)
    """Labels selecting the operator's own pods (`--pod-labels`, set by the chart)."""
    default_telemetry: TelemetrySpec = field(default_factory=TelemetrySpec)
    """`spec.telemetry` of the deployments that name no endpoint (`--default-telemetry`, the
    chart's `telemetry` values): one collector for everything unless a deployment says."""
    node_failure_toleration_seconds: int = DEFAULT_NODE_FAILURE_SECONDS
    """How long agent and registry pods stay on a node that stopped reporting before they are
    evicted, unless a deployment's `runtime.nodeFailureTolerationSeconds` says
    (`--node-failure-toleration-seconds`, the chart's `nodeFailureTolerationSeconds`)."""
    event_kinds: tuple[EventKind, ...] = ()
    """Kinds event triggers may watch (`--event-kind`, the chart's `triggers.eventKinds`, whose
    RBAC lets the operator list and watch them); a trigger on another kind is not accepted."""
