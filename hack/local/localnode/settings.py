"""What the environment asks of the node, validated into one frozen value.

Every name, range and port the node takes on this machine is a knob, so a second checkout can run
its control plane beside this one (with PALLAS_NODE=0: only one node per machine, see `network`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from localnode import NodeError

# Ranges that exist only inside a machine (RFC 1918). Python's is_private also accepts the
# documentation ranges (192.0.2.0/24 is this machine's uplink), so the list is explicit.
CLUSTER_PREFIX_DIFF = 4
MAX_NODES = 2**CLUSTER_PREFIX_DIFF
"""Nodes of one cluster: its pod range holds this many node subnets (see `cluster_cidr`)."""
RFC1918_V4 = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
BRIDGE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,14}$")
NODE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class NodeSettings:
    """The node's names, address ranges and ports."""

    enabled: bool
    name: str
    bridge: str
    pod_cidr: str
    """The node's pod subnet; the bridge (and so the node) takes its first address."""
    service_cidr: str
    kubelet_port: int
    kubelet_healthz_port: int
    proxy_healthz_port: int
    proxy_metrics_port: int
    netpol_metrics_port: int = 9080
    """kube-network-policies' metrics, on loopback (`netpol`). A default: state written before
    the node enforced NetworkPolicy has no such field."""

    @property
    def node_ip(self) -> str:
        return str(next(ipaddress.ip_network(self.pod_cidr).hosts()))

    @property
    def prefix(self) -> int:
        return ipaddress.ip_network(self.pod_cidr).prefixlen

    @property
    def cluster_cidr(self) -> str:
        """The pod range of the whole cluster: room for MAX_NODES pod subnets of this size, the
        first node's subnet first (a second node takes the next block, and so on). Pods are routed
        the whole range through their node, so one added later is reached without new routes."""
        net = ipaddress.ip_network(self.pod_cidr)
        return str(net.supernet(prefixlen_diff=CLUSTER_PREFIX_DIFF))

    @property
    def api_service_ip(self) -> str:
        """The `kubernetes` Service's address: the first of the Service range."""
        return str(ipaddress.ip_network(self.service_cidr)[1])

    @property
    def dns_ip(self) -> str:
        """kube-dns's address: the tenth of the Service range, as kubeadm and kind choose it."""
        return str(ipaddress.ip_network(self.service_cidr)[10])

    @property
    def guard_table(self) -> str:
        """The nftables table of this node's network guard (one per bridge)."""
        return "pallas_guard_" + self.bridge.replace("-", "_")

    def ports(self) -> dict[str, int]:
        return {
            "kubelet": self.kubelet_port,
            "kubelet healthz": self.kubelet_healthz_port,
            "kube-proxy healthz": self.proxy_healthz_port,
            "kube-proxy metrics": self.proxy_metrics_port,
            "kube-network-policies metrics": self.netpol_metrics_port,
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> NodeSettings:
        return NodeSettings(**data)


PORT_VARS = {
    "kubelet_port": ("PALLAS_KUBELET_PORT", 10250),
    "kubelet_healthz_port": ("PALLAS_KUBELET_HEALTHZ_PORT", 10248),
    "proxy_healthz_port": ("PALLAS_KUBE_PROXY_HEALTHZ_PORT", 10256),
    "proxy_metrics_port": ("PALLAS_KUBE_PROXY_METRICS_PORT", 10249),
    "netpol_metrics_port": ("PALLAS_NETWORK_POLICIES_METRICS_PORT", 9080),
}


def _port(var: str, default: int) -> int:
    raw = os.environ.get(var, str(default))
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise NodeError(f"{var}={raw!r} is not a TCP port number (1-65535)")
    return int(raw)


def _private_range(var: str, default: str, max_prefix: int) -> ipaddress.IPv4Network:
    raw = os.environ.get(var, default)
    try:
        net = ipaddress.ip_network(raw, strict=True)
    except ValueError as exc:
        raise NodeError(f"{var}={raw!r} is not an IPv4 network in CIDR form ({exc})") from None
    if not isinstance(net, ipaddress.IPv4Network) or not any(net.subnet_of(r) for r in RFC1918_V4):
        raise NodeError(
            f"{var}={raw!r} must be an IPv4 range inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16 "
            "(ranges that exist only inside this machine)"
        )
    if net.prefixlen > max_prefix:
        raise NodeError(f"{var}={raw!r} is too small: use a /{max_prefix} or larger")
    return net


def from_env() -> NodeSettings:
    """The node asked for by PALLAS_NODE* and friends; bad values are one-line NodeErrors."""
    enabled = os.environ.get("PALLAS_NODE", "1")
    if enabled not in ("0", "1"):
        raise NodeError(f"PALLAS_NODE={enabled!r} must be 1 (a node with the control plane) or 0 (none)")
    name = os.environ.get("PALLAS_NODE_NAME", "pallas-node")
    if not NODE_NAME.match(name):
        raise NodeError(f"PALLAS_NODE_NAME={name!r} is not a DNS label (lower-case letters, digits, '-')")
    bridge = os.environ.get("PALLAS_NODE_BRIDGE", "pallas0")
    if not BRIDGE_NAME.match(bridge):
        raise NodeError(
            f"PALLAS_NODE_BRIDGE={bridge!r} is not an interface name (a letter, then up to 14 of a-z 0-9 -)"
        )
    pods = _private_range("PALLAS_POD_CIDR", "10.244.0.0/24", 28)
    services = _private_range("PALLAS_SERVICE_CIDR", "10.96.0.0/16", 24)
    if pods.overlaps(services):
        raise NodeError(f"PALLAS_POD_CIDR {pods} and PALLAS_SERVICE_CIDR {services} overlap")
    cluster = pods.supernet(prefixlen_diff=CLUSTER_PREFIX_DIFF)
    if cluster.overlaps(services):
        raise NodeError(
            f"the cluster's pod range {cluster} (PALLAS_POD_CIDR {pods} and the {MAX_NODES - 1} "
            f"subnets after it, one per node) overlaps PALLAS_SERVICE_CIDR {services}"
        )
    if not any(cluster.subnet_of(r) for r in RFC1918_V4):
        raise NodeError(
            f"the cluster's pod range {cluster} (PALLAS_POD_CIDR {pods} and the subnets after it, "
            "one per node) leaves the private ranges; choose another PALLAS_POD_CIDR"
        )
    ports = {field: _port(var, default) for field, (var, default) in PORT_VARS.items()}
    if len(set(ports.values())) != len(ports):
        raise NodeError(f"the node's ports must differ: {', '.join(v for v, _ in PORT_VARS.values())}")
    return NodeSettings(
        enabled=enabled == "1",
        name=name,
        bridge=bridge,
        pod_cidr=str(pods),
        service_cidr=str(services),
        **ports,
    )


def node_count(raw: str | None = None) -> int:
    """How many nodes the cluster runs (`--nodes`, else PALLAS_NODES; default 1)."""
    source = "--nodes" if raw is not None else "PALLAS_NODES"
    value = raw if raw is not None else os.environ.get("PALLAS_NODES", "1")
    if not value.isdigit() or not 1 <= int(value) <= MAX_NODES:
        raise NodeError(f"{source}={value!r} must be a number of nodes from 1 to {MAX_NODES}")
    return int(value)


def check_ranges_are_free(settings: NodeSettings, ours: frozenset[str] = frozenset()) -> None:
    """Refuse ranges that any interface or route of this machine already uses (other than ours:
    the bridge and the links to the other nodes, `ours`): a pod or Service address must never
    mean a host out there."""
    ours = ours | {settings.bridge}
    res = subprocess.run(["ip", "-j", "route", "show", "table", "all"], capture_output=True, text=True)
    if res.returncode != 0:
        raise NodeError(f"`ip route` failed: {res.stderr.strip()}")
    wanted = {
        "PALLAS_POD_CIDR": ipaddress.ip_network(settings.cluster_cidr),
        "PALLAS_SERVICE_CIDR": ipaddress.ip_network(settings.service_cidr),
    }
    for route in json.loads(res.stdout or "[]"):
        dst, dev = route.get("dst", ""), route.get("dev", "")
        if dev in ours or route.get("type") in ("unreachable", "blackhole", "prohibit"):
            continue
        if dst in ("default", "") or ":" in dst:
            continue
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if net.is_loopback:
            continue
        for var, mine in wanted.items():
            if isinstance(net, ipaddress.IPv4Network) and mine.overlaps(net):
                raise NodeError(
                    f"{var} {mine} overlaps {net} (dev {dev or '?'}) on this machine; choose another range"
                )
