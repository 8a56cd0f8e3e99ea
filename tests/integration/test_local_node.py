"""The session cluster's real node: Ready, CoreDNS answering only the cluster, and the network
pieces that keep pod and Service traffic on this machine in place.

Nothing here sends a packet anywhere but to this machine: DNS questions go to the cluster DNS,
routes are looked up (`ip route get` sends nothing), rules and sysctls are read.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import HACK_CLUSTER, LocalCluster


@pytest.fixture(scope="module")
def node(kube_cluster: LocalCluster) -> dict[str, Any]:
    env = json.loads(
        subprocess.run([str(HACK_CLUSTER), "env", "--json"], capture_output=True, text=True).stdout
    )
    if not env.get("node"):
        pytest.skip("the session cluster runs without a node (PALLAS_NODE=0)")
    return dict(env["node"])


def ask(server: str, name: str, qtype: int = 1) -> tuple[int, list[str]]:
    """One DNS question over UDP: (rcode, the A records of the answer)."""
    ident = secrets.randbits(16)
    query = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0)
    query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    query += struct.pack(">HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.sendto(query, (server, 53))
        reply = sock.recv(4096)
    got, flags, _, answers = struct.unpack(">HHHH", reply[:8])
    assert got == ident
    addresses = []
    if answers:  # the question is echoed back first; A records end with a 4-byte address
        addresses = [socket.inet_ntoa(reply[-4:])] if reply[-6:-4] == b"\x00\x04" else []
    return flags & 0xF, addresses


def test_the_node_is_ready_with_containerd(kube_cluster: LocalCluster, node: dict[str, Any]) -> None:
    obj = json.loads(kube_cluster.kubectl("get", "node", node["node_name"], "-o", "json").stdout)
    info = obj["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.34.10"
    assert info["containerRuntimeVersion"].startswith("containerd://1.")
    ready = {c["type"]: c["status"] for c in obj["status"]["conditions"]}["Ready"]
    assert ready == "True"
    assert not [t for t in obj["spec"].get("taints", []) if t["key"] == "node.kubernetes.io/not-ready"]
    assert {"type": "InternalIP", "address": node["node_ip"]} in obj["status"]["addresses"]


def test_coredns_answers_cluster_names_and_refuses_the_rest(node: dict[str, Any]) -> None:
    rcode, addresses = ask(node["dns_ip"], "kubernetes.default.svc.cluster.local")
    assert (rcode, addresses) == (0, [str(node["service_cidr"]).rsplit(".", 2)[0] + ".0.1"])
    # Not forwarded anywhere: refused on the spot (5), which sends the host's resolver on.
    assert ask(node["dns_ip"], "pallas-test.invalid")[0] == 5
    # The host resolves cluster names through it.
    assert socket.gethostbyname("kube-dns.kube-system.svc.cluster.local") == node["dns_ip"]


def test_the_network_keeps_pod_and_service_traffic_on_the_machine(node: dict[str, Any]) -> None:
    state = json.loads(
        subprocess.run([str(HACK_CLUSTER), "env", "--json"], capture_output=True, text=True).stdout
    )
    bridge = json.loads((Path(state["state_dir"]) / "state.json").read_text())["node"]["bridge"]
    table = "pallas_guard_" + bridge.replace("-", "_")
    rules = subprocess.run(["nft", "list", "table", "inet", table], capture_output=True, text=True)
    assert rules.returncode == 0, "the guard table is installed"
    for chain in ("forward", "postrouting", "input"):
        assert f"chain {chain}" in rules.stdout
    # Forwarding only on the bridge; the machine-wide switch is left off.
    assert Path(f"/proc/sys/net/ipv4/conf/{bridge}/forwarding").read_text().strip() == "1"
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "0"
    # A Service or pod address is routed onto the bridge, never towards the default route.
    service_ip = str(node["service_cidr"]).rsplit(".", 2)[0] + ".200.200"
    pod_ip = str(node["pod_cidr"]).rsplit(".", 1)[0] + ".250"
    for address in (service_ip, pod_ip):
        [route] = json.loads(
            subprocess.run(["ip", "-j", "route", "get", address], capture_output=True, text=True).stdout
        )
        assert route["dev"] == bridge, route
    fallbacks = json.loads(
        subprocess.run(
            ["ip", "-j", "route", "show", "type", "unreachable"], capture_output=True, text=True
        ).stdout
    )
    assert {node["cluster_cidr"], node["service_cidr"]} <= {r["dst"] for r in fallbacks}


def recorded(name: str) -> dict[str, Any]:
    state_dir = json.loads(
        subprocess.run([str(HACK_CLUSTER), "env", "--json"], capture_output=True, text=True).stdout
    )["state_dir"]
    procs = json.loads((Path(state_dir) / "state.json").read_text())["processes"]
    return dict(next(p for p in procs if p["name"] == name))


KUBELET_REPROBE_WITHIN = 30.0
"""A restarted kubelet starts without probe results: it reports running containers unready until
their readiness probe passes again (2-3 s here), and CoreDNS drops out of its Service meanwhile."""


def test_restarting_containerd_and_the_kubelet_keeps_the_node_and_its_pods(
    kube_cluster: LocalCluster, node: dict[str, Any]
) -> None:
    def coredns() -> dict[str, Any]:
        listed = kube_cluster.kubectl(
            "get", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns", "-o", "json"
        )
        (pod,) = json.loads(listed.stdout)["items"]
        return dict(pod)

    def identity(pod: dict[str, Any]) -> tuple[str, str]:
        return pod["metadata"]["uid"], pod["status"]["containerStatuses"][0]["containerID"]

    def ready_since(pod: dict[str, Any]) -> str:
        ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
        return str(ready["lastTransitionTime"]) if ready["status"] == "True" else ""

    before = coredns()
    restarted_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for component in ("containerd", "kubelet"):
        old = recorded(component)
        command = Path(f"/proc/{old['pid']}/cmdline").read_bytes()
        res = subprocess.run(
            [str(HACK_CLUSTER), "restart", component], capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0, res.stderr
        new = recorded(component)
        assert new["pid"] != old["pid"], f"{component} was not restarted"
        assert Path(f"/proc/{new['pid']}/cmdline").read_bytes() == command, "started as `up` started it"

    # Leave the node as whole as it was: wait out the kubelet's re-probe of CoreDNS.
    def status() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(HACK_CLUSTER), "status"], capture_output=True, text=True, timeout=60)

    deadline = time.monotonic() + KUBELET_REPROBE_WITHIN
    while time.monotonic() < deadline:
        if ready_since(coredns()) >= restarted_at and status().returncode == 0:
            break
        time.sleep(0.5)
    final = status()
    assert final.returncode == 0, final.stdout
    # The containers ran on through both restarts: the same pod, the same container.
    assert identity(coredns()) == identity(before)
    unknown = subprocess.run([str(HACK_CLUSTER), "restart", "nginx"], capture_output=True, text=True)
    assert unknown.returncode == 1
    assert "'nginx' is not a component of this cluster (it runs: etcd, kube-apiserver" in unknown.stderr


# --- the second node ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def second(kube_cluster: LocalCluster) -> dict[str, Any]:
    env = json.loads(
        subprocess.run([str(HACK_CLUSTER), "env", "--json"], capture_output=True, text=True).stdout
    )
    nodes = env.get("nodes") or []
    if len(nodes) < 2:
        pytest.skip("the session cluster runs one node (PALLAS_TEST_NODES=1)")
    return dict(nodes[1])


def inside(netns: str, *argv: str) -> str:
    res = subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_the_second_node_is_ready_in_a_network_namespace_of_its_own(
    kube_cluster: LocalCluster, node: dict[str, Any], second: dict[str, Any]
) -> None:
    obj = json.loads(kube_cluster.kubectl("get", "node", second["node_name"], "-o", "json").stdout)
    assert {c["type"]: c["status"] for c in obj["status"]["conditions"]}["Ready"] == "True"
    assert {"type": "InternalIP", "address": second["node_ip"]} in obj["status"]["addresses"]
    assert not [t for t in obj["spec"].get("taints", []) if t["key"] == "node.kubernetes.io/not-ready"]
    # The next subnet of the cluster's range, on a bridge inside its own namespace.
    assert second["pod_cidr"] != node["pod_cidr"]
    assert second["cluster_cidr"] == node["cluster_cidr"]
    netns = second["netns"]
    routes = json.loads(inside(netns, "ip", "-j", "route", "show"))
    assert "default" not in {r["dst"] for r in routes}, "nothing is routed out of the node's namespace"
    via_host = {r["dst"]: r for r in routes if r.get("gateway")}
    assert via_host[node["cluster_cidr"]]["gateway"] == node["node_ip"]
    assert set(via_host) == {node["cluster_cidr"]}
    # Its kubelet, kube-proxy and containerd are in that namespace; its pods' cgroups under its root.
    for name in ("kubelet", "kube-proxy", "containerd"):
        pid = recorded(f"{name}@{second['node_name']}")["pid"]
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{netns}").st_ino
        assert os.stat(f"/proc/{pid}/ns/mnt").st_ino == os.stat("/proc/self/ns/mnt").st_ino
    assert Path("/sys/fs/cgroup/pids" + second["cgroup_root"] + "/kubepods").is_dir()
    # The host forwards for the link alone; the machine-wide switch stays off.
    assert Path(f"/proc/sys/net/ipv4/conf/{second['host_link']}/forwarding").read_text().strip() == "1"
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "0"
    [route] = json.loads(
        subprocess.run(
            ["ip", "-j", "route", "get", second["pod_cidr"].rsplit(".", 1)[0] + ".250"],
            capture_output=True,
            text=True,
        ).stdout
    )
    assert route["dev"] == second["host_link"], route
    # kube-network-policies enforces there, in its own table.
    assert "table inet kube-network-policies" in inside(netns, "nft", "list", "tables")


def test_only_a_node_after_the_first_can_be_killed(node: dict[str, Any], second: dict[str, Any]) -> None:
    res = subprocess.run(
        [str(HACK_CLUSTER), "kill-node", node["node_name"]], capture_output=True, text=True, timeout=30
    )
    assert res.returncode == 1
    assert (
        f"'{node['node_name']}' is not a node after the first (those can be killed: {second['node_name']}); "
        "the first node holds the control plane's address"
    ) in res.stderr
