"""Prometheus Operator ServiceMonitors for a deployment's agents and registry."""

from __future__ import annotations

from pallas_api import names
from pallas_api.spec import PallasDeploymentSpec
from pallas_operator.builders.meta import (
    Manifest,
    Owner,
    component_labels,
    metadata,
    registry_labels,
    registry_selector,
)

SERVICE_MONITOR_API = "monitoring.coreos.com/v1"


def _service_monitor(
    name: str, owner: Owner, labels: dict[str, str], selector: dict[str, str], interval: str
) -> Manifest:
    return {
        "apiVersion": SERVICE_MONITOR_API,
        "kind": "ServiceMonitor",
        "metadata": metadata(name, owner, labels),
        "spec": {
            "selector": {"matchLabels": selector},
            "namespaceSelector": {"matchNames": [owner.namespace]},
            "endpoints": [{"port": names.METRICS_PORT_NAME, "path": "/metrics", "interval": interval}],
        },
    }


def service_monitors(owner: Owner, spec: PallasDeploymentSpec) -> list[Manifest]:
    """One ServiceMonitor selecting the agents' Services, one the registry's; none when disabled."""
    settings = spec.monitoring.service_monitor
    if not settings.enabled:
        return []
    agents_labels = component_labels(owner.name, "agent", names.service_monitor_name(owner.name, "agent"))
    monitors = [
        _service_monitor(
            names.service_monitor_name(owner.name, "agent"),
            owner,
            {**settings.labels, **agents_labels},
            {names.LABEL_DEPLOYMENT: owner.name, names.LABEL_COMPONENT: "agent"},
            settings.interval,
        )
    ]
    if spec.registry.enabled:
        monitors.append(
            _service_monitor(
                names.service_monitor_name(owner.name, "registry"),
                owner,
                {**settings.labels, **registry_labels(owner.name)},
                registry_selector(owner.name),
                settings.interval,
            )
        )
    return monitors
