"""The node's network, built so that no pod or Service packet can leave this machine.

Layers, each enough on its own for the traffic it covers (docs/local-kubernetes.md, "Network"):

1. **Guard** — an nftables table of our own (`inet pallas_guard_<bridge>`), installed before the
   bridge exists and removed last. Its chains run before kube-proxy's iptables-nft chains and a
   drop in any table is final, so kube-proxy's ACCEPT rules cannot reopen what it closes:
   forwarding only between the cluster's own segments (the pod bridge and the links to the
   other nodes' network namespaces, `workers`); nothing to or from the pod or Service
   ranges, and no connection first addressed to a Service or opened by a pod, leaves by any
   interface but `lo` and the bridge (whatever DNAT or masquerading made of it); the node's
   addresses answer only on `lo` and the bridge.
2. **Routes** — pods get no default route, only their subnet and the Service range via the node.
   On the host the Service range is routed onto the bridge (a local segment with only pods on it)
   and both ranges have `unreachable` fallbacks, so even with the bridge gone nothing reaches the
   default route.
3. **Forwarding** — switched on for the bridge alone (`net.ipv4.conf.<bridge>.forwarding`); the
   machine-wide `net.ipv4.ip_forward` stays as it was (off here), so nothing arriving on eth0 is
   ever routed. The CNI bridge plugin runs with `isGateway: false` because with a gateway it
   switches the machine-wide flag on; the bridge gets its address from here instead.
4. **No NAT out** — the CNI plugin's masquerading is off; kube-proxy only masquerades hairpin
   traffic (a pod reaching itself through its Service), which stays on the bridge.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

from localnode import NodeError
from localnode.procs import any_recorded_alive
from localnode.settings import NodeSettings

LOCK = Path("/run/pallas-node.json")
"""Who runs the node on this machine: one node per machine (cgroups, /var/log/containers, the
host resolver are machine-wide)."""
UNREACHABLE_METRIC = 4095
BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def run(*argv: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    if check and res.returncode != 0:
        raise NodeError(f"{' '.join(argv[:4])} failed: {(res.stderr or res.stdout).strip()[:300]}")
    return res


# --- the guard ---------------------------------------------------------------------------------


def guard_rules(s: NodeSettings, uplinks: tuple[str, ...] = ()) -> str:
    """The guard table as an nft script (replaces an older copy in one transaction).

    `uplinks` are the host's ends of the links to the other nodes (`workers`): the cluster's
    segments are the bridge and those links, and traffic between them is the only traffic
    forwarded. The pod range is the whole cluster's (every node's subnet)."""
    pods, services = s.cluster_cidr, s.service_cidr
    inside = ", ".join(f'"{name}"' for name in (s.bridge, *uplinks))
    table = f"inet {s.guard_table}"
    return f"""
table {table}
delete table {table}
table {table} {{
    chain forward {{
        type filter hook forward priority -300; policy accept;
        iifname {{ {inside} }} oifname {{ {inside} }} accept
        iifname {{ {inside} }} drop
        oifname {{ {inside} }} drop
        ip daddr {{ {pods}, {services} }} drop
        ip saddr {{ {pods}, {services} }} drop
    }}
    chain postrouting {{
        type filter hook postrouting priority -300; policy accept;
        oifname {{ "lo", {inside} }} accept
        ip daddr {{ {pods}, {services} }} drop
        ip saddr {{ {pods}, {services} }} drop
        ct original ip daddr {services} drop
        ct original ip saddr {pods} drop
    }}
    chain input {{
        type filter hook input priority -300; policy accept;
        iifname {{ "lo", {inside} }} accept
        ip daddr {{ {pods}, {services} }} drop
        ip saddr {{ {pods}, {services} }} drop
    }}
}}
"""


def install_guard(s: NodeSettings, uplinks: tuple[str, ...] = ()) -> None:
    run("nft", "-f", "-", stdin=guard_rules(s, uplinks))


def guard_installed(s: NodeSettings) -> bool:
    return run("nft", "list", "table", "inet", s.guard_table, check=False).returncode == 0


def remove_guard(s: NodeSettings) -> None:
    if guard_installed(s):
        run("nft", "delete", "table", "inet", s.guard_table)


# --- the machine-wide lock ----------------------------------------------------------------------


def take_lock(s: NodeSettings, state_dir: Path) -> None:
    """Refuse a second node on this machine (one of its processes still runs); else claim it."""
    try:
        holder = json.loads(LOCK.read_text())
    except (OSError, ValueError):
        holder = None
    if holder and holder.get("state_dir") != str(state_dir):
        other = Path(str(holder.get("state_dir")))
        if any_recorded_alive(other):
            raise NodeError(
                f"another local node runs on this machine (state in {other}); stop it with "
                f"`PALLAS_CLUSTER_DIR={other} hack/local/cluster down`, "
                "or start this cluster with PALLAS_NODE=0"
            )
    LOCK.write_text(json.dumps({"state_dir": str(state_dir), "bridge": s.bridge}) + "\n")


def holds_lock(state_dir: Path) -> bool:
    """True when this cluster claimed the machine's node, or nobody holds the claim any more."""
    try:
        holder = json.loads(LOCK.read_text())
    except (OSError, ValueError):
        return True
    return bool(holder.get("state_dir") == str(state_dir))


def release_lock(state_dir: Path) -> None:
    try:
        holder = json.loads(LOCK.read_text())
    except (OSError, ValueError):
        return
    if holder.get("state_dir") == str(state_dir):
        LOCK.unlink(missing_ok=True)


# --- bridge, routes, sysctls --------------------------------------------------------------------


def sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def bridge_exists(s: NodeSettings) -> bool:
    return Path(f"/sys/class/net/{s.bridge}").exists()


def setup_bridge(s: NodeSettings) -> dict[str, str]:
    """Create the bridge with the node's address; returns machine-wide sysctls changed (to restore)."""
    if not bridge_exists(s):
        run("ip", "link", "add", s.bridge, "type", "bridge")
    # IPv4 only: no IPv6 addresses or router solicitations on the pod segment.
    sysctl_path(f"net.ipv6.conf.{s.bridge}.disable_ipv6").write_text("1\n")
    run("ip", "addr", "replace", f"{s.node_ip}/{s.prefix}", "dev", s.bridge)
    run("ip", "link", "set", s.bridge, "up")
    changed: dict[str, str] = {}
    # kube-proxy's DNAT must see pod-to-pod traffic the bridge forwards at layer 2 (replies of a
    # Service connection between two pods); the kernel default is on, but check.
    if BRIDGE_NF.exists() and BRIDGE_NF.read_text().strip() != "1":
        changed["net.bridge.bridge-nf-call-iptables"] = BRIDGE_NF.read_text().strip()
        BRIDGE_NF.write_text("1\n")
    # Routing between pods and Services (pod -> Service IP -> pod) on this bridge only.
    sysctl_path(f"net.ipv4.conf.{s.bridge}.forwarding").write_text("1\n")
    return changed


def setup_routes(s: NodeSettings) -> None:
    # The Service range lives on the bridge: the host's connections to a Service IP need a route
    # before kube-proxy's DNAT rewrites them, and it must not be the default route.
    run("ip", "route", "replace", s.service_cidr, "dev", s.bridge, "src", s.node_ip)
    for cidr in fallback_ranges(s):
        run("ip", "route", "replace", "unreachable", cidr, "metric", str(UNREACHABLE_METRIC))


def fallback_ranges(s: NodeSettings) -> tuple[str, ...]:
    """The ranges with an `unreachable` route underneath: the whole cluster's pod range (every
    node's subnet, those of nodes not started too) and the Service range."""
    return (s.cluster_cidr, s.service_cidr)


KUBELET_CHAINS = {
    "filter": ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY"),
    "nat": ("KUBE-KUBELET-CANARY",),
    "mangle": ("KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"),
}


def remove_kubelet_chains() -> None:
    """The chains the kubelet makes (kube-proxy --cleanup leaves them): its canaries, the hint
    chain, and KUBE-FIREWALL with the jumps to it."""
    for tool in ("iptables", "ip6tables"):
        for builtin in ("INPUT", "OUTPUT"):
            run(tool, "-t", "filter", "-D", builtin, "-j", "KUBE-FIREWALL", check=False)
        for table, chains in KUBELET_CHAINS.items():
            for chain in chains:
                run(tool, "-t", table, "-F", chain, check=False)
                run(tool, "-t", table, "-X", chain, check=False)


def teardown(s: NodeSettings, changed_sysctls: dict[str, str]) -> None:
    """Undo `setup_bridge` and `setup_routes` (the guard is removed separately, last)."""
    if bridge_exists(s):
        run("ip", "link", "del", s.bridge)
    # Both the cluster's range and (state from before there were several nodes) the node's own.
    for cidr in {*fallback_ranges(s), s.pod_cidr}:
        run("ip", "route", "del", "unreachable", cidr, "metric", str(UNREACHABLE_METRIC), check=False)
    for name, value in changed_sysctls.items():
        path = sysctl_path(name)
        if path.exists():
            path.write_text(value + "\n")


def check_forwarding_is_off_elsewhere() -> None:
    """The design keeps machine-wide IPv4 forwarding off; say so if someone turned it on."""
    if sysctl_path("net.ipv4.ip_forward").read_text().strip() != "0":
        # Not fatal: the guard drops whatever is not bridge-to-bridge either way.
        print(
            "hack/local/cluster: note: net.ipv4.ip_forward is on on this machine (not by us); "
            "the node's guard still drops every forwarded packet that is not bridge-to-bridge",
            flush=True,
        )


def status(s: NodeSettings) -> dict[str, bool]:
    """What of the network is in place (for `hack/local/cluster status`)."""
    routes = run("ip", "-j", "route", "show", "type", "unreachable", check=False).stdout or "[]"
    fallbacks = {r.get("dst") for r in json.loads(routes)}
    want = {str(ipaddress.ip_network(c)) for c in fallback_ranges(s)}
    return {
        "guard": guard_installed(s),
        "bridge": bridge_exists(s),
        "unreachable fallbacks": want <= fallbacks,
    }
