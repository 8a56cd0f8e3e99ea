"""containerd from the outside: images in, every container out, and the mounts a node leaves.

`down` cannot rely on the kubelet to stop pods (the control plane goes away with it), so it
kills the containers through containerd, kills what might survive that (shims, processes left in
the pods' cgroups), and unmounts everything under the node's folder (network namespaces, root
filesystems, Secret and token tmpfs mounts, the kubelet's own bind mount) before deleting it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from localnode import NodeError
from localnode.configs import NodePaths

NAMESPACE = "k8s.io"  # the containerd namespace the CRI plugin uses
POD_CGROUPS = Path("/sys/fs/cgroup/pids/kubepods")
CONTAINER_LOG_LINKS = Path("/var/log/containers")


def ctr(paths: NodePaths, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", str(paths.containerd_socket), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def images(paths: NodePaths) -> set[str]:
    res = ctr(paths, "images", "list", "--quiet")
    if res.returncode != 0:
        raise NodeError(f"ctr images list failed: {res.stderr.strip()[:300]}")
    return set(res.stdout.split())


def import_image(paths: NodePaths, archive: Path, ref: str) -> bool:
    """Import a docker-archive into the node unless `ref` is there already; True if imported."""
    if ref in images(paths):
        return False
    res = ctr(paths, "images", "import", "--snapshotter", "overlayfs", str(archive))
    if res.returncode != 0:
        raise NodeError(f"importing {archive} into the node's containerd failed: {res.stderr.strip()[:300]}")
    if ref not in images(paths):
        # An archive without the name (e.g. an oci-archive) imports silently as nothing.
        raise NodeError(f"{archive} imported, but the node has no image {ref} afterwards")
    return True


def every_node(cluster_env: dict[str, object]) -> list[NodePaths]:
    """Each node's folder, from `hack/local/cluster env --json` (the first node alone for a
    state from before there were several)."""
    nodes = cluster_env.get("nodes")
    if isinstance(nodes, list) and nodes:
        return [NodePaths(Path(str(n["node_dir"]))) for n in nodes if isinstance(n, dict)]
    return [NodePaths(Path(str(cluster_env["state_dir"])) / "node")]


def import_everywhere(nodes: list[NodePaths], archive: Path, ref: str) -> int:
    """Import an image into every node that lacks it (a pod may land on any); how many did."""
    return sum(import_image(paths, archive, ref) for paths in nodes)


def kill_containers(paths: NodePaths) -> None:
    """SIGKILL every task containerd runs for the node and delete them (best effort)."""
    if not paths.containerd_socket.exists():
        return
    res = ctr(paths, "tasks", "list", "--quiet", timeout=30)
    tasks = res.stdout.split() if res.returncode == 0 else []
    for task in tasks:
        ctr(paths, "tasks", "kill", "--signal", "SIGKILL", task, timeout=30)
    for task in tasks:
        ctr(paths, "tasks", "delete", "--force", task, timeout=30)


def _pids_with(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(proc.name))
    return found


def kill_leftovers(paths: NodePaths, pod_cgroups: Path | None = POD_CGROUPS) -> None:
    """Kill runtime shims of this node's containerd and any process left in its pod cgroups
    (`pod_cgroups`: the first node's `/kubepods`; another node passes its own, or None)."""
    for pid in _pids_with(f"-address {paths.containerd_socket}"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if pod_cgroups is not None and pod_cgroups.is_dir():
        for procs in pod_cgroups.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                for line in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(line), signal.SIGKILL)
    time.sleep(0.2)


def mounts_below(folder: Path) -> list[Path]:
    """Mount points under `folder` (itself included), deepest first."""
    prefix = str(folder.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(Path(point))
    return sorted(set(points), key=lambda p: len(p.parts), reverse=True)


def unmount_below(folder: Path) -> None:
    """Unmount everything under `folder`; refuse to go on if anything stays mounted (deleting
    through a mount could reach files that are not the node's)."""
    for _ in range(3):
        points = mounts_below(folder)
        if not points:
            return
        for point in points:
            subprocess.run(["umount", "--lazy", str(point)], capture_output=True, timeout=30)
    left = mounts_below(folder)
    if left:
        raise NodeError(
            f"{left[0]} is still mounted; unmount it by hand, then run hack/local/cluster down again"
        )


def remove_container_log_links(paths: NodePaths) -> None:
    """The kubelet links every container log into /var/log/containers; remove ours."""
    if not CONTAINER_LOG_LINKS.is_dir():
        return
    ours = str(paths.pod_logs.resolve())
    for link in CONTAINER_LOG_LINKS.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(ours):
                link.unlink()
