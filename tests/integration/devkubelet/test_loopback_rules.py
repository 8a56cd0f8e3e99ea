"""The dev kubelet's loopback-only rules, without a cluster: backends, pod ranges, probe hosts.

Pod IPs are loopback addresses, which the API server refuses in EndpointSlices, so
hack/devkubelet/hosts.py selects each Service's pods itself; these tests pin down that selection,
the pod-range check and the probe-host check. The end-to-end behaviour (readiness, Service changes,
HTTP by name) is in test_dev_kubelet.py.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import REPO

sys.path.insert(0, str(REPO / "hack"))
from devkubelet.hosts import HostsFile, ServiceDNS, service_backends
from devkubelet.ipam import PodIPs, check_pod_cidr
from devkubelet.probes import ProbeTarget, probe_host

NODE = "dev-a"
NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def service(name: str, selector: dict[str, str] | None = None, ns: str = "ns", **spec: Any) -> dict[str, Any]:
    if selector is not None:
        spec["selector"] = selector
    return {"metadata": {"name": name, "namespace": ns, "uid": f"svc-{ns}-{name}"}, "spec": spec}


def pod(
    name: str,
    ip: str | None,
    *,
    labels: dict[str, str] | None = None,
    ready: bool = True,
    node: str = NODE,
    ns: str = "ns",
    deleting: bool = False,
    phase: str = "Running",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": f"pod-{name}",
        "labels": labels or {"app": "web"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T12:00:00Z"
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


def node(name: str, *, ready: bool = True, beat: datetime = NOW) -> dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "lastHeartbeatTime": beat.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return {"metadata": {"name": name, "uid": f"node-{name}"}, "status": {"conditions": [condition]}}


def test_ready_running_pods_matching_the_selector_are_backends() -> None:
    pods = [
        pod("a", "127.1.0.2"),
        pod("b", "127.1.0.3", ready=False),
        pod("c", "127.1.0.4", deleting=True),
        pod("d", None),
        pod("e", "127.1.0.5", labels={"app": "other"}),
        pod("f", "127.1.0.6", ns="elsewhere"),
        pod("g", "127.1.0.7", phase="Succeeded"),
        pod("h", "127.1.0.8", labels={"app": "web", "tier": "x"}),  # extra labels still match
    ]
    assert service_backends([service("web", {"app": "web"})], pods, {NODE}) == {
        "web.ns": {"127.1.0.2", "127.1.0.8"}
    }


def test_services_without_derivable_backends_are_left_out() -> None:
    pods = [pod("a", "127.1.0.2")]
    services = [
        service("manual"),  # selector-less: someone else would manage its endpoints
        service("empty", {}),
        service("external", {"app": "web"}, type="ExternalName", externalName="example.org"),
        service("nobody", {"app": "nobody"}),
        service("headless", {"app": "web"}, clusterIP="None"),
    ]
    assert service_backends(services, pods, {NODE}) == {"headless.ns": {"127.1.0.2"}}


def test_publish_not_ready_addresses_counts_running_pods_that_are_not_ready() -> None:
    pods = [pod("a", "127.1.0.2", ready=False)]
    services = [
        service("peers", {"app": "web"}, publishNotReadyAddresses=True),
        service("web", {"app": "web"}),
    ]
    assert service_backends(services, pods, {NODE}) == {"peers.ns": {"127.1.0.2"}}


def test_only_loopback_addresses_on_live_dev_nodes_are_used() -> None:
    pods = [
        pod("a", "10.244.0.5"),  # never written: this machine may only send to 127.0.0.0/8
        pod("b", "127.1.0.9", node="real-node"),
        pod("c", "127.1.0.10", node="dev-b"),
    ]
    assert service_backends([service("web", {"app": "web"})], pods, {NODE}) == {}
    assert service_backends([service("web", {"app": "web"})], pods, {NODE, "dev-b"}) == {
        "web.ns": {"127.1.0.10"}
    }


def test_other_dev_nodes_count_while_ready_with_a_recent_heartbeat(tmp_path: Path) -> None:
    dns = ServiceDNS(None, HostsFile(tmp_path / "hosts", NODE), NODE)  # type: ignore[arg-type]
    for item in (
        node("dev-b"),
        node("dev-c", ready=False),
        node("dev-d", beat=NOW - timedelta(minutes=5)),  # crashed: its pods' status is stale
    ):
        dns.nodes.items[item["metadata"]["uid"]] = item
    assert dns.live_nodes(NOW) == {NODE, "dev-b"}


def test_the_chosen_pod_stays_while_it_is_ready(tmp_path: Path) -> None:
    dns = ServiceDNS(None, HostsFile(tmp_path / "hosts", NODE), NODE)  # type: ignore[arg-type]
    dns.services.items = {"s": service("web", {"app": "web"})}
    dns.pods.items = {"b": pod("b", "127.1.0.20")}
    assert dns.compute() == {"web.ns": "127.1.0.20"}
    dns._mapping = dns.compute()
    dns.pods.items["a"] = pod("a", "127.1.0.3")
    assert dns.compute() == {"web.ns": "127.1.0.20"}, "a ready choice is kept"
    dns.pods.items["b"] = pod("b", "127.1.0.20", ready=False)
    assert dns.compute() == {"web.ns": "127.1.0.3"}


@pytest.mark.parametrize(
    "bad", ["10.0.0.0/24", "10.244.0.0/16", "192.168.1.0/24", "0.0.0.0/0", "126.0.0.0/7"]
)
def test_pod_ranges_must_be_loopback(bad: str) -> None:
    assert str(check_pod_cidr("127.1.0.0/16")) == "127.1.0.0/16"
    with pytest.raises(ValueError, match=r"outside 127\.0\.0\.0/8"):
        check_pod_cidr(bad)


def test_the_host_address_is_never_handed_out() -> None:
    ips = PodIPs("127.0.0.0/30")  # hosts 127.0.0.1 and 127.0.0.2
    assert ips.allocate("a", preferred="127.0.0.1") == "127.0.0.2"


@pytest.mark.parametrize(
    ("host", "expected"),
    [(None, "127.1.0.7"), ("127.0.0.1", "127.0.0.1"), ("127.5.5.5", "127.5.5.5"), ("localhost", "127.0.0.1")],
)
def test_probes_connect_to_loopback(host: str | None, expected: str) -> None:
    target = ProbeTarget("127.1.0.7", {}, 0, {})
    assert probe_host({"host": host} if host else {}, target) == expected


@pytest.mark.parametrize("host", ["10.0.0.1", "192.168.1.1", "example.org", "::1"])
def test_probes_refuse_other_hosts(host: str) -> None:
    with pytest.raises(ValueError, match="not a loopback address"):
        probe_host({"host": host}, ProbeTarget("127.1.0.7", {}, 0, {}))
