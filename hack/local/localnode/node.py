"""Bringing the node up after the control plane, and down before it.

`claim` checks the prerequisites and claims the machine's one node; `prepare` (before the API
server: it binds the node's bridge address) lays the network with its guard. `start` runs
containerd, the kubelet and kube-proxy, waits for a Ready node without the not-ready taint,
deploys CoreDNS and kube-network-policies (NetworkPolicy enforcement, `netpol`) and points the
host's resolver at CoreDNS. `stop_workloads` (before the control plane
stops) and `stop_network` (after) undo all of it, the guard last; they work from what `up`
recorded, so a half-started node is cleaned up as well as a whole one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from localnode import NodeError, configs, dns, images, netpol, network, runtime, workers
from localnode.configs import NodePaths
from localnode.settings import NodeSettings, check_ranges_are_free
from localnode.workers import Worker

Proc = dict[str, Any]
COMMANDS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "buildah": "buildah",
    "debootstrap": "debootstrap",
    "iptables": "iptables",
    "nft": "nftables",
    "catatonit": "catatonit",
    "ip": "iproute2",
    configs.CNI_BIN_DIR + "/bridge": "containernetworking-plugins",
    configs.CNI_BIN_DIR + "/host-local": "containernetworking-plugins",
    configs.CNI_BIN_DIR + "/loopback": "containernetworking-plugins",
}


class Launcher(Protocol):
    """hack/local/cluster's way of starting a component and waiting for it."""

    def start(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, netns: str | None = None
    ) -> Proc: ...

    def wait_until(self, what: str, check: Callable[[], bool], proc: Proc, timeout: float) -> None: ...


def check_prerequisites() -> None:
    if os.geteuid() != 0:
        raise NodeError(
            "the local node needs root (containers, network, cgroups); run as root or set PALLAS_NODE=0"
        )
    for command, package in COMMANDS.items():
        found = os.access(command, os.X_OK) if command.startswith("/") else shutil.which(command)
        if not found:
            raise NodeError(f"{command} is missing (Debian package {package}); run `make system-deps`")


def claim(s: NodeSettings, state_dir: Path) -> None:
    """Check the prerequisites and claim the machine's one node (before anything is recorded,
    so a refused claim never makes `down` touch the node that holds it)."""
    check_prerequisites()
    network.take_lock(s, state_dir)


def prepare(s: NodeSettings, state_dir: Path) -> dict[str, str]:
    """The guard, the bridge and the routes; returns the machine-wide sysctls it changed."""
    check_ranges_are_free(s, frozenset(workers.all_host_links(s)))
    # First: nothing of the node exists without it. It counts the links of every node the
    # cluster may add later, so adding one never rewrites it.
    network.install_guard(s, workers.all_host_links(s))
    changed = network.setup_bridge(s)
    network.setup_routes(s)
    network.check_forwarding_is_off_elsewhere()
    return changed


def kubectl(
    bins: Path, kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bins / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def node_ready(bins: Path, kubeconfig: Path, s: NodeSettings) -> bool:
    res = kubectl(
        bins,
        kubeconfig,
        "get",
        "node",
        s.name,
        "-o",
        'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}',
    )
    ready, _, taints = res.stdout.partition(" ")
    # A node back from the dead keeps its unreachable taint until the node monitor sees it Ready.
    gone = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    return res.returncode == 0 and ready == "True" and not any(t in taints for t in gone)


def resolves(name: str, address: str) -> bool:
    try:
        return address in {info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET)}
    except OSError:
        return False


def start(
    s: NodeSettings,
    state_dir: Path,
    pki: Path,
    bins: Path,
    addons: Path,
    kubeconfig: Path,
    launcher: Launcher,
) -> dict[str, str]:
    """containerd, kubelet, kube-proxy, CoreDNS, kube-network-policies and the host resolver;
    returns the images used. `addons` holds the binaries of hack/build/cluster-addons.sh. The
    launcher records each process as it starts, so a failure here is cleaned up by `stop`."""
    paths = NodePaths(state_dir / "node")
    pause, coredns = images.pause_image(), images.coredns_image(bins)
    policies = images.network_policies_image(addons)
    configs.write_all(s, paths, pki, pause.ref)
    _, proxy = start_components(s, paths, bins, kubeconfig, launcher, (pause, coredns, policies))

    res = kubectl(bins, kubeconfig, "apply", "-f", "-", stdin=dns.manifest_text(s, coredns.ref))
    if res.returncode != 0:
        raise NodeError(f"applying the kube-dns objects failed: {res.stderr.strip()[:300]}")
    launcher.wait_until(
        "CoreDNS (kube-system/coredns) ready",
        lambda: (
            kubectl(
                bins,
                kubeconfig,
                "-n",
                "kube-system",
                "get",
                "deploy/coredns",
                "-o",
                "jsonpath={.status.readyReplicas}",
            ).stdout
            == "1"
        ),
        proxy,
        120,
    )
    res = kubectl(bins, kubeconfig, "apply", "-f", "-", stdin=netpol.manifest_text(s, policies.ref))
    if res.returncode != 0:
        raise NodeError(f"applying the kube-network-policies objects failed: {res.stderr.strip()[:300]}")
    launcher.wait_until(
        f"kube-network-policies enforcing (its nftables table inet {netpol.TABLE} written)",
        netpol.table_present,
        proxy,
        120,
    )
    dns.host_resolver_on(s, state_dir)
    name = f"kubernetes.default.svc.{configs.CLUSTER_DOMAIN}"
    launcher.wait_until(
        f"{name} resolving to {s.api_service_ip} on this machine (host → kube-dns Service → CoreDNS)",
        lambda: resolves(name, s.api_service_ip),
        proxy,
        30,
    )
    return {"pause": pause.ref, "coredns": coredns.ref, "kube-network-policies": policies.ref}


def component(name: str, w: Worker | None) -> str:
    """A process's name in the cluster's state: `kubelet` on the first node, `kubelet@<node>`
    on the others."""
    return name if w is None else f"{name}@{w.name}"


def start_components(
    s: NodeSettings,
    paths: NodePaths,
    bins: Path,
    kubeconfig: Path,
    launcher: Launcher,
    node_images: tuple[images.Image, ...],
    w: Worker | None = None,
) -> tuple[Proc, Proc]:
    """containerd (with the node's images imported), the kubelet and kube-proxy, until the node
    is Ready without the not-ready taint; inside the node's namespace for a worker `w`. Returns
    the kubelet and kube-proxy."""
    netns = w.netns if w is not None else None
    containerd = launcher.start(
        component("containerd", w),
        [shutil.which("containerd") or "containerd", "--config", str(paths.containerd_config)],
        env={**os.environ, **configs.containerd_env()},
        netns=netns,
    )
    launcher.wait_until(
        f"containerd of {s.name} answering on its socket",
        lambda: runtime.ctr(paths, "version", timeout=10).returncode == 0,
        containerd,
        30,
    )
    for image in node_images:
        runtime.import_image(paths, image.archive, image.ref)

    kubelet = launcher.start(
        component("kubelet", w),
        [
            str(bins / "kubelet"),
            f"--config={paths.kubelet_config}",
            f"--kubeconfig={paths.kubeconfig('kubelet')}",
            f"--root-dir={paths.kubelet_dir}",
            f"--cert-dir={paths.kubelet_dir / 'pki'}",
            f"--hostname-override={s.name}",
            f"--node-ip={s.node_ip}",
            "--v=1",
        ],
        netns=netns,
    )
    proxy = launcher.start(
        component("kube-proxy", w),
        [str(bins / "kube-proxy"), f"--config={paths.proxy_config}", "--v=1"],
        netns=netns,
    )
    launcher.wait_until(
        f"node {s.name} Ready without the not-ready taint",
        lambda: node_ready(bins, kubeconfig, s),
        kubelet,
        90,
    )
    return kubelet, proxy


def start_worker(
    w: Worker, state_dir: Path, pki: Path, bins: Path, addons: Path, kubeconfig: Path, launcher: Launcher
) -> None:
    """Another node: its namespace and link, cgroup root, containerd, kubelet and kube-proxy,
    until it is Ready and kube-network-policies (a DaemonSet, so it comes by itself) enforces in
    its namespace. Its kubeconfigs are written by the caller, as for the first node."""
    paths = w.paths(state_dir)
    pause, coredns = images.pause_image(), images.coredns_image(bins)
    policies = images.network_policies_image(addons)
    configs.write_all(w.node, paths, pki, pause.ref, cert=w.serving_cert, cgroup_root=w.cgroup_root)
    workers.lay_network(w)
    workers.make_cgroup_root(w)
    _, proxy = start_components(w.node, paths, bins, kubeconfig, launcher, (pause, coredns, policies), w)
    launcher.wait_until(
        f"kube-network-policies enforcing on {w.name} (its table in namespace {w.netns})",
        lambda: netpol.table_present(w.netns),
        proxy,
        120,
    )


def stop_worker(
    w: Worker, state_dir: Path, procs: list[Proc], stop_processes: Callable[[list[Proc]], None]
) -> None:
    """Everything of a worker, in the order `stop_workloads` uses, then its namespace and cgroups."""
    paths = w.paths(state_dir)
    by_name = {str(p["name"]): p for p in procs}
    stop_processes(
        [by_name[n] for n in (component("kubelet", w), component("kube-proxy", w)) if n in by_name]
    )
    runtime.kill_containers(paths)
    stop_processes([by_name[n] for n in (component("containerd", w),) if n in by_name])
    runtime.kill_leftovers(paths, None)  # not the first node's pod cgroups
    workers.kill_cgroup(w)
    runtime.remove_container_log_links(paths)
    if paths.root.exists():
        runtime.unmount_below(paths.root)
        shutil.rmtree(paths.root, ignore_errors=True)
    workers.remove_network(w)
    workers.remove_cgroup_root(w)


def crash_worker(w: Worker, state_dir: Path, procs: list[Proc]) -> None:
    """The node as a machine losing power: its kubelet, kube-proxy, containerd, shims and every
    container process SIGKILLed at once, and its link down; nothing is cleaned up or told."""
    names = {component(n, w) for n in ("kubelet", "kube-proxy", "containerd")}
    for proc in procs:
        if proc["name"] in names:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(str(proc["pid"])), signal.SIGKILL)
    workers.link_up(w, False)
    runtime.kill_leftovers(w.paths(state_dir), None)  # its own cgroups only, below
    workers.kill_cgroup(w)


def stop_workloads(
    s: NodeSettings, state_dir: Path, procs: list[Proc], stop_processes: Callable[[list[Proc]], None]
) -> None:
    """The node's processes and everything they run or mounted: resolver block, kube-proxy and
    kubelet, containers, containerd, leftovers, mounts, files. The network stays until the
    control plane has stopped (it listens on the bridge address: with the address gone, its
    connections could not even close, and it would wait for them)."""
    paths = NodePaths(state_dir / "node")
    by_name = {str(p["name"]): p for p in procs}
    if not network.holds_lock(state_dir):
        # Another cluster's node owns the machine-wide pieces (bridge, guard, resolver, pod
        # cgroups): only this cluster's own processes and files go.
        stop_processes([by_name[n] for n in ("kubelet", "kube-proxy", "containerd") if n in by_name])
        if not runtime.mounts_below(paths.root):
            shutil.rmtree(paths.root, ignore_errors=True)
        return
    dns.host_resolver_off()
    stop_processes([by_name[n] for n in ("kubelet", "kube-proxy") if n in by_name])
    runtime.kill_containers(paths)
    stop_processes([by_name[n] for n in ("containerd",) if n in by_name])
    runtime.kill_leftovers(paths)
    runtime.remove_container_log_links(paths)
    if paths.root.exists():
        runtime.unmount_below(paths.root)
        shutil.rmtree(paths.root, ignore_errors=True)


def stop_network(s: NodeSettings, state_dir: Path, sysctls: dict[str, str], bins: Path | None) -> None:
    """After everything else: kube-proxy's and the kubelet's rules, bridge and routes, sysctls,
    and the guard last."""
    if not network.holds_lock(state_dir):
        return
    if bins is not None and (bins / "kube-proxy").exists() and network.guard_installed(s):
        # kube-proxy's KUBE-* chains; with the proxy stopped nothing re-adds them.
        subprocess.run([str(bins / "kube-proxy"), "--cleanup"], capture_output=True, timeout=60)
    network.remove_kubelet_chains()
    netpol.remove_table()  # its pod was killed with the others, before it could remove it
    network.teardown(s, sysctls)
    network.remove_guard(s)  # last: the ranges are unreachable and unrouted by now
    network.release_lock(state_dir)


def worker_status(w: Worker, bins: Path, kubeconfig: Path) -> dict[str, bool]:
    """What of a worker works (for `hack/local/cluster status`)."""
    return {
        f"node {w.name} network": workers.netns_exists(w),
        f"node {w.name} Ready": node_ready(bins, kubeconfig, w.node),
        f"node {w.name} NetworkPolicy": netpol.table_present(w.netns),
    }


def status(s: NodeSettings, bins: Path, kubeconfig: Path) -> dict[str, bool]:
    """What of the node works (for `hack/local/cluster status`)."""
    found = {f"network {what}": ok for what, ok in network.status(s).items()}
    found[f"node {s.name} Ready"] = node_ready(bins, kubeconfig, s)
    found["NetworkPolicy enforcement"] = netpol.table_present()
    found["host resolver"] = dns.host_resolver_is_on() and resolves(
        f"kubernetes.default.svc.{configs.CLUSTER_DOMAIN}", s.api_service_ip
    )
    return found
