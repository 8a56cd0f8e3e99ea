"""Prometheus metrics of the registry (docs/api.md §5): `pallas_up` and `pallas_registry_*`.

Each app gets its own CollectorRegistry (several registries can live in one process, as in
tests), or joins one it is given: under `pallas run` that is the agents' registry, so the
registry's `/metrics` is the one scrape target of the whole local deployment, as in the original
Pallas, and every agent port serves the same snapshot. Request series are labelled by route
template and status code, never by path or query, so cardinality stays bounded. Catalogue and
source figures are read from the source at scrape time rather than pushed, so they can never
drift from what is served.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from pallas_registry.providers import ProviderChecks
from pallas_registry.schema import STATUSES
from pallas_registry.source import CatalogueSource

# `*_created` series double the exposition size and nothing reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""Classic text format: what every Prometheus version and promtool accept."""
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class _SourceCollector(Collector):
    """Catalogue size and source health, read from the source on every scrape."""

    def __init__(self, source: CatalogueSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        catalogue = self._source.store.snapshot()
        servers = GaugeMetricFamily(
            "pallas_registry_servers", "Catalogue entries by official status.", labels=["status"]
        )
        for status in STATUSES:
            servers.add_metric([status], catalogue.count(status))
        yield servers
        yield GaugeMetricFamily(
            "pallas_registry_agents_left_out",
            "Agents left out of the catalogue for missing or invalid status.",
            value=catalogue.left_out,
        )
        yield GaugeMetricFamily(
            "pallas_registry_catalogue_version", "Changes applied to the catalogue.", value=catalogue.version
        )
        yield GaugeMetricFamily(
            "pallas_registry_source_ready",
            "1 once the source's first full list is in.",
            value=self._source.ready,
        )
        yield GaugeMetricFamily(
            "pallas_registry_source_connected",
            "1 while the source reaches what it watches (0 during an API outage).",
            value=self._source.connected,
        )
        restarts = CounterMetricFamily(
            "pallas_registry_watch_restarts",
            "Restarts of the watch or poll loop, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(self._source.restarts.items()):
            restarts.add_metric([reason], count)
        yield restarts


class _ProviderCollector(Collector):
    """`pallas_registry_provider_up`: the last check of each provider (none before it is checked)."""

    def __init__(self, checks: ProviderChecks) -> None:
        self._checks = checks

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "pallas_registry_provider_up",
            "1 when the LLM provider passed the registry's last check of it.",
            labels=["deployment", "provider"],
        )
        for result in self._checks.results:
            up.add_metric([*result.target.ident], 1 if result.ok else 0)
        yield up


class RegistryMetrics:
    """The metric families of one registry app."""

    def __init__(
        self,
        source: CatalogueSource,
        *,
        process_collectors: bool = True,
        registry: CollectorRegistry | None = None,
    ) -> None:
        """Create the families in a registry of their own, or in `registry`.

        Args:
            source: The source whose catalogue and state are reported.
            process_collectors: Also export `process_*` (off when several apps share a process).
            registry: A registry to join (the agents' one under `pallas run`); its owner already
                exports `pallas_up` and the process collectors, so neither is added again.
        """
        self.registry = registry or CollectorRegistry()
        if registry is None:
            if process_collectors:
                ProcessCollector(registry=self.registry)
            Gauge("pallas_up", "1 while the Pallas process runs.", registry=self.registry).set(1)
        self.requests = Counter(
            "pallas_registry_requests",
            "HTTP requests by route template and status code.",
            ["route", "code"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "pallas_registry_request_duration_seconds",
            "HTTP request duration by route template.",
            ["route"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self._joined: list[Collector] = [self.requests, self.duration, _SourceCollector(source)]
        self.registry.register(self._joined[-1])

    def watch_providers(self, checks: ProviderChecks) -> None:
        """Export the provider checks' results (once per app)."""
        self._joined.append(_ProviderCollector(checks))
        self.registry.register(self._joined[-1])

    def leave(self) -> None:
        """Take this app's families out of the registry it joined.

        A registry that `pallas run --reload` restarts joins the agents' registry again.
        """
        for collector in self._joined:
            self.registry.unregister(collector)
        self._joined.clear()

    def observe(self, route: str, code: int, seconds: float) -> None:
        """Record one finished request."""
        self.requests.labels(route, str(code)).inc()
        self.duration.labels(route).observe(seconds)

    def exposition(self) -> bytes:
        """The Prometheus text exposition of every family."""
        return generate_latest(self.registry)
