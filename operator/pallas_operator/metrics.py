"""The operator's Prometheus metrics (api.md §5), on the operator's own registry."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from pallas_io.triggers.metrics import trigger_metrics


class _Resources(Collector):
    """pallas_operator_resources{kind,phase}, counted at scrape time from the last known phases."""

    def __init__(self) -> None:
        self.phases: dict[tuple[str, str, str], str] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "pallas_operator_resources",
            "PallasAgents and PallasDeployments by phase",
            labels=["kind", "phase"],
        )
        for (kind, phase), count in sorted(Tally((k[0], p) for k, p in self.phases.items()).items()):
            family.add_metric([kind, phase], count)
        yield family


class OperatorMetrics:
    """Reconcile counts and durations, resources by phase, and API writes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.triggers = trigger_metrics(self.registry)
        """The runs of the PallasTriggers this operator fires."""
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        histogram = partial(Histogram, registry=self.registry)
        self.reconciles = counter(
            "pallas_operator_reconcile", "Reconciles by kind and outcome (ok, error)", ["kind", "outcome"]
        )
        self.duration = histogram(
            "pallas_operator_reconcile_duration_seconds",
            "Time one reconcile took",
            ["kind"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.writes = counter(
            "pallas_operator_api_writes",
            "Write requests to the API server by kind and verb (apply, status, delete, event)",
            ["kind", "verb"],
        )
        self.watch_events = counter(
            "pallas_operator_watch_events",
            "Watched objects' events by kind and stage: indexed (recorded in the operator's "
            "indexes) and handled (routed to the work queue)",
            ["kind", "stage"],
        )
        self.ready = gauge(
            "pallas_operator_ready",
            "1 once initial indexing finished and handlers run (what /readyz says), else 0",
        )
        self.queue_depth = gauge("pallas_operator_queue_depth", "Reconciles queued or running")
        self._resources = _Resources()
        self.registry.register(self._resources)

    def set_phase(self, kind: str, namespace: str, name: str, phase: str | None) -> None:
        """Record a resource's phase; None when the resource is gone."""
        if phase is None:
            self._resources.phases.pop((kind, namespace, name), None)
        else:
            self._resources.phases[(kind, namespace, name)] = phase

    def count_write(self, kind: str, verb: str) -> None:
        """Count one write request to the API server."""
        self.writes.labels(kind=kind, verb=verb).inc()

    def render(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)
