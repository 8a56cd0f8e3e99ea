"""What a node of the local cluster costs: start time and memory per node; prints figures.

    flock /work/node.lock .venv/bin/python bench/nodes.py [--nodes 2] [--rounds 3] [--keep-cluster]

Needs root. Starts the local cluster with one node if none runs, then `--rounds` times: adds the
second (…`--nodes`th) node with `hack/local/cluster up --nodes N` and times it until the node is
Ready with kube-network-policies enforcing in its namespace, reads each node's memory, kills the
added nodes (`kill-node`) and times `up` starting them again (a crashed node's restart). Memory
per node: the resident set of its containerd, kubelet and kube-proxy (with the shims of its
containerd), and what its pod cgroups hold (`memory.usage_in_bytes`), both as the kernel counts
them. Not a timed test; docs/local-kubernetes.md has the figures measured here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HACK_CLUSTER = REPO / "hack" / "local" / "cluster"
MIB = 1024 * 1024


def hack(*args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(HACK_CLUSTER), *args], capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        sys.exit(f"hack/local/cluster {' '.join(args)} failed: {res.stderr.strip()[-2000:]}")
    return res


def rss(pid: int) -> int:
    """Resident bytes of one process (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def shims(containerd_address: str) -> list[int]:
    """The runtime shims of one containerd (they name its socket on their command line)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "containerd-shim" in cmdline and f"-address {containerd_address}" in cmdline:
                found.append(int(proc.name))
    return found


def pods_memory(cgroup_root: str) -> int:
    path = Path("/sys/fs/cgroup/memory") / cgroup_root.lstrip("/") / "kubepods" / "memory.usage_in_bytes"
    try:
        return int(path.read_text())
    except OSError:
        return 0


def memory(env: dict[str, object]) -> dict[str, tuple[int, int]]:
    """Per node: (bytes resident in its node processes and shims, bytes in its pod cgroups)."""
    state = json.loads((Path(str(env["state_dir"])) / "state.json").read_text())
    nodes = env.get("nodes")
    assert isinstance(nodes, list)
    out = {}
    for node in nodes:
        name = node["node_name"]
        suffix = "" if not node.get("netns") else f"@{name}"
        pids = [
            int(p["pid"])
            for p in state["processes"]
            if p["name"] in {f"containerd{suffix}", f"kubelet{suffix}", f"kube-proxy{suffix}"}
        ]
        pids += shims(node["containerd_address"])
        out[name] = (sum(rss(pid) for pid in pids), pods_memory(node.get("cgroup_root") or "/"))
    return out


def ready_seconds(stderr: str) -> list[float]:
    """The `node NAME Ready in Xs` figures `up` logs for each node it started."""
    found = []
    for line in stderr.splitlines():
        if " Ready in " in line and "node " in line:
            found.append(float(line.split(" Ready in ")[1].split("s")[0]))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2, help="nodes in all (2-16)")
    parser.add_argument("--rounds", type=int, default=3, help="times to add and restart the nodes")
    parser.add_argument("--keep-cluster", action="store_true", help="leave a cluster this run started")
    args = parser.parse_args()
    if not 2 <= args.nodes <= 16 or args.rounds < 1:
        parser.error("--nodes must be 2 to 16 and --rounds at least 1")
    was_running = subprocess.run([str(HACK_CLUSTER), "status"], capture_output=True).returncode == 0
    hack("up")
    added: list[float] = []
    restarted: list[float] = []
    mem: dict[str, list[tuple[int, int]]] = {}
    try:
        for _ in range(args.rounds):
            env = json.loads(hack("env", "--json").stdout)
            workers = [n["node_name"] for n in env["nodes"][1:]]
            if workers:  # from an earlier round or run: down to one node first
                hack("down")
                hack("up")
            t0 = time.monotonic()
            res = hack("up", "--nodes", str(args.nodes))
            added.append(time.monotonic() - t0)
            time.sleep(5)  # let the DaemonSet pods and the first syncs settle before reading memory
            env = json.loads(hack("env", "--json").stdout)
            for name, reading in memory(env).items():
                mem.setdefault(name, []).append(reading)
            for name in [n["node_name"] for n in env["nodes"][1:]]:
                hack("kill-node", name)
            res = hack("up", "--nodes", str(args.nodes))
            restarted.extend(ready_seconds(res.stderr))
    finally:
        if not was_running and not args.keep_cluster:
            subprocess.run([str(HACK_CLUSTER), "down"], capture_output=True, timeout=300)
    print(f"\n{args.nodes} nodes, {args.rounds} round(s); median (min-max)")

    def fig(values: list[float], unit: str = "s", scale: float = 1.0) -> str:
        v = [x / scale for x in values]
        return f"{statistics.median(v):.1f} {unit} ({min(v):.1f}-{max(v):.1f})"

    print(f"  adding {args.nodes - 1} node(s) to a running cluster (`up --nodes {args.nodes}`): {fig(added)}")
    print(f"  a killed node started again by `up`, until Ready and enforcing: {fig(restarted)}")
    for name, figures in mem.items():
        node_rss = [float(r) for r, _ in figures]
        pods = [float(p) for _, p in figures]
        print(f"  {name}: containerd + kubelet + kube-proxy + shims {fig(node_rss, 'MiB', MIB)}, "
              f"pod cgroups {fig(pods, 'MiB', MIB)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
