"""Nodes after the first: each a machine of its own, as far as the network and the cgroups can tell.

A kind cluster's nodes are containers with their own network stacks; here a second (third, …)
node is a **network namespace** of its own with its own containerd, kubelet and kube-proxy, so its
interfaces, routes and iptables/nftables rules are its own, exactly as on another machine:

- **Link.** A veth pair joins it to the machine: `<bridge>-n<index>` on the host, `uplink` inside.
  Neither end has an address. The node's address is its bridge's (the first of its pod subnet,
  as on the first node); each side reaches the other's address through a static neighbour entry
  and an on-link route, so no ARP crosses the link and no new range is taken.
- **Routes.** Inside: the node's pod subnet on its bridge, the Service range on its bridge
  (kube-proxy DNATs it), and the whole cluster's pod range via the first node (the host), which
  holds the route of every other node's subnet. No default route exists in the namespace: a
  packet for anywhere else has nowhere to go. On the host: the node's subnet via its link.
- **Guard.** The first node's guard (`network.guard_rules`) counts every node's link among the
  cluster's segments: traffic between the bridge and the links is forwarded, nothing from a link
  goes anywhere else, and the cluster's pod range covers every node's subnet. Forwarding is on
  for the link alone (`net.ipv4.conf.<link>.forwarding`), never machine-wide.
- **Processes.** containerd, the kubelet and kube-proxy are started inside the namespace
  (`enter_netns` before exec) but in the machine's mount namespace, so the kubelet's volume
  mounts are the ones runc sees. Host-network pods (kube-network-policies) run in the node's
  namespace, and keep their rules there.
- **cgroups.** Two kubelets must not share `/kubepods`: this node's pods live under
  `/<node name>/kubepods` (the kubelet's `cgroupRoot`), created here in every hierarchy.

Everything the node keeps is under `<state>/nodes/<name>/`; `stop` undoes all of it, `crash`
kills it as a power cut would (processes, containers and link, nothing cleaned up).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from localnode import NodeError
from localnode.configs import NodePaths
from localnode.settings import MAX_NODES, NodeSettings

UPLINK = "uplink"
"""The node's end of its link to the machine, inside its namespace."""
NETNS_DIR = Path("/run/netns")
CGROUP_FS = Path("/sys/fs/cgroup")
CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class Worker:
    """A node after the first: its settings and where it lives on this machine."""

    index: int
    """2 for the second node, and so on."""
    node: NodeSettings
    """Its name, bridge (inside its namespace), pod subnet and ports."""
    host_ip: str
    """The first node's address: the host's end of every link, and the API server."""

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def netns(self) -> str:
        return netns_name(self.node.bridge, self.index)

    @property
    def host_link(self) -> str:
        return host_link_name(self.node.bridge, self.index)

    @property
    def cgroup_root(self) -> str:
        return "/" + self.name

    @property
    def serving_cert(self) -> str:
        """The kubelet's serving certificate (`<name>.crt/.key` in the PKI folder)."""
        return f"kubelet-{self.name}"

    @property
    def client_cert(self) -> str:
        return f"kubelet-client-{self.name}"

    def paths(self, state_dir: Path) -> NodePaths:
        return NodePaths(state_dir / "nodes" / self.name)

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "node": self.node.to_json(), "host_ip": self.host_ip}

    @staticmethod
    def from_json(data: dict[str, object]) -> Worker:
        node = data["node"]
        assert isinstance(node, dict)
        return Worker(int(str(data["index"])), NodeSettings.from_json(node), str(data["host_ip"]))


def netns_name(bridge: str, index: int) -> str:
    return f"{bridge}-n{index}"


def host_link_name(bridge: str, index: int) -> str:
    # Interface names have at most 15 characters: `-n16` takes four.
    return f"{bridge[:11]}-n{index}"


def all_host_links(first: NodeSettings) -> tuple[str, ...]:
    """The host ends of every link a cluster of this first node could have: the guard counts
    them all from the start, so adding a node never loosens or rewrites it."""
    return tuple(host_link_name(first.bridge, i) for i in range(2, MAX_NODES + 1))


def worker(first: NodeSettings, index: int) -> Worker:
    """Node `index` (2…MAX_NODES) of the cluster whose first node is `first`: the next free
    subnet of the cluster's pod range, `<first name>-<index>`, the same ports (its own loopback)."""
    if not 2 <= index <= MAX_NODES:
        raise NodeError(f"node {index} is out of range: a cluster here has 1 to {MAX_NODES} nodes")
    cluster = ipaddress.ip_network(first.cluster_cidr)
    subnets = [n for n in cluster.subnets(new_prefix=first.prefix) if str(n) != first.pod_cidr]
    name = f"{first.name}-{index}"
    if len(name) > 63:
        raise NodeError(f"node name {name!r} is longer than 63 characters; shorten PALLAS_NODE_NAME")
    node = NodeSettings(
        enabled=True,
        name=name,
        bridge=first.bridge,
        pod_cidr=str(subnets[index - 2]),
        service_cidr=first.service_cidr,
        kubelet_port=first.kubelet_port,
        kubelet_healthz_port=first.kubelet_healthz_port,
        proxy_healthz_port=first.proxy_healthz_port,
        proxy_metrics_port=first.proxy_metrics_port,
        netpol_metrics_port=first.netpol_metrics_port,
    )
    return Worker(index, node, first.node_ip)


# --- commands in and around the namespace ---------------------------------------------------------


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and res.returncode != 0:
        raise NodeError(f"{' '.join(argv[:6])} failed: {(res.stderr or res.stdout).strip()[:300]}")
    return res


def inside(w: Worker, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A command in the node's network namespace."""
    return run("ip", "netns", "exec", w.netns, *argv, check=check)


def set_sysctl_inside(w: Worker, name: str, value: str) -> None:
    # /proc/sys/net is the reading process's own namespace's.
    path = "/proc/sys/" + name.replace(".", "/")
    inside(w, "sh", "-c", f"[ ! -e {path} ] || echo {value} > {path}")


def enter_netns(name: str) -> None:
    """Join the network namespace `name` (for a child between fork and exec; Python 3.11 has no
    os.setns). The mount namespace stays the machine's."""
    fd = os.open(NETNS_DIR / name, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def netns_exists(w: Worker) -> bool:
    return (NETNS_DIR / w.netns).exists()


def link_mac(w: Worker, host_side: bool) -> str:
    res = (
        run("ip", "-j", "link", "show", w.host_link)
        if host_side
        else inside(w, "ip", "-j", "link", "show", UPLINK)
    )
    return str(json.loads(res.stdout)[0]["address"])


# --- the network -----------------------------------------------------------------------------------


def lay_network(w: Worker) -> None:
    """The namespace, its link to the machine, its bridge, routes and sysctls (idempotent)."""
    if not netns_exists(w):
        run("ip", "netns", "add", w.netns)
    if not Path(f"/sys/class/net/{w.host_link}").exists():
        run("ip", "link", "add", w.host_link, "type", "veth", "peer", "name", UPLINK, "netns", w.netns)
    host = Path("/proc/sys/net")
    (host / "ipv6" / "conf" / w.host_link / "disable_ipv6").write_text("1\n")
    # Forwarding on the link only: node ↔ first node's pods and the other nodes (the guard allows
    # nothing else out of it).
    (host / "ipv4" / "conf" / w.host_link / "forwarding").write_text("1\n")
    run("ip", "link", "set", w.host_link, "up")

    s = w.node
    inside(w, "ip", "link", "set", "lo", "up")
    if inside(w, "ip", "link", "show", s.bridge, check=False).returncode != 0:
        inside(w, "ip", "link", "add", s.bridge, "type", "bridge")
    for link in (s.bridge, UPLINK):
        set_sysctl_inside(w, f"net.ipv6.conf.{link}.disable_ipv6", "1")
        set_sysctl_inside(w, f"net.ipv4.conf.{link}.forwarding", "1")
    set_sysctl_inside(w, "net.bridge.bridge-nf-call-iptables", "1")
    inside(w, "ip", "addr", "replace", f"{s.node_ip}/{s.prefix}", "dev", s.bridge)
    inside(w, "ip", "link", "set", s.bridge, "up")
    inside(w, "ip", "link", "set", UPLINK, "up")

    # Each end knows the other's address and MAC: nothing is resolved across the link.
    run(
        "ip",
        "neigh",
        "replace",
        s.node_ip,
        "lladdr",
        link_mac(w, False),
        "dev",
        w.host_link,
        "nud",
        "permanent",
    )
    inside(
        w, "ip", "neigh", "replace", w.host_ip, "lladdr", link_mac(w, True), "dev", UPLINK, "nud", "permanent"
    )
    run(
        "ip", "route", "replace", s.pod_cidr, "via", s.node_ip, "dev", w.host_link, "onlink", "src", w.host_ip
    )
    inside(
        w,
        "ip",
        "route",
        "replace",
        s.cluster_cidr,
        "via",
        w.host_ip,
        "dev",
        UPLINK,
        "onlink",
        "src",
        s.node_ip,
    )
    inside(w, "ip", "route", "replace", s.service_cidr, "dev", s.bridge, "src", s.node_ip)


def link_up(w: Worker, up: bool) -> None:
    """The node's link, as a cable plugged in or pulled."""
    run("ip", "link", "set", w.host_link, "up" if up else "down", check=up)


def remove_network(w: Worker) -> None:
    """The namespace (its link, bridge, routes and rules go with it) and the host's end."""
    if netns_exists(w):
        run("ip", "netns", "del", w.netns, check=False)
    if Path(f"/sys/class/net/{w.host_link}").exists():
        run("ip", "link", "del", w.host_link, check=False)


# --- cgroups ---------------------------------------------------------------------------------------


def hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers and the unified one), each once."""
    seen: dict[Path, Path] = {}
    if CGROUP_FS.is_dir():
        for entry in sorted(CGROUP_FS.iterdir()):
            real = entry.resolve()
            if (real / "cgroup.procs").exists():
                seen.setdefault(real, real)
    return list(seen)


def make_cgroup_root(w: Worker) -> None:
    """`/<name>` in every hierarchy, for the kubelet's cgroupRoot (it refuses a missing one)."""
    for hierarchy in hierarchies():
        folder = hierarchy / w.cgroup_root.lstrip("/")
        folder.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):  # an empty cpuset admits no task
            mine, parent = folder / name, hierarchy / name
            if mine.exists() and not mine.read_text().strip():
                mine.write_text(parent.read_text())


def cgroup_pids(w: Worker) -> set[int]:
    found: set[int] = set()
    for hierarchy in hierarchies():
        root = hierarchy / w.cgroup_root.lstrip("/")
        if root.is_dir():
            for procs in root.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    found.update(int(line) for line in procs.read_text().split())
    return found


def kill_cgroup(w: Worker) -> None:
    """SIGKILL every process in the node's pod cgroups (what its machine losing power does)."""
    for _ in range(5):
        pids = cgroup_pids(w)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def remove_cgroup_root(w: Worker) -> None:
    kill_cgroup(w)
    for hierarchy in hierarchies():
        root = hierarchy / w.cgroup_root.lstrip("/")
        if not root.is_dir():
            continue
        folders = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for folder in [*folders, root]:
            with contextlib.suppress(OSError):
                folder.rmdir()
