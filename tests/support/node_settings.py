"""The local node's settings as `hack/local/cluster` defaults them, for tests of its pieces."""

from __future__ import annotations

from localnode.settings import NodeSettings

DEFAULTS = NodeSettings(
    enabled=True,
    name="pallas-node",
    bridge="pallas0",
    pod_cidr="10.244.0.0/24",
    service_cidr="10.96.0.0/16",
    kubelet_port=10250,
    kubelet_healthz_port=10248,
    proxy_healthz_port=10256,
    proxy_metrics_port=10249,
)
