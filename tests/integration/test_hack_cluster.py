"""hack/local/cluster and hack/build/k8s-bins.sh: lifecycle and bad input.

Each run uses its own state folder and ports, so these tests never disturb the session's cluster.
A machine has one local node (the session's); the second clusters here run without one
(PALLAS_NODE=0), and a second node is refused without touching the first.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import REPO, LocalCluster

HACK_LOCAL = REPO / "hack" / "local"
HACK_BUILD = REPO / "hack" / "build"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env={**os.environ, **env}, timeout=timeout)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.fixture
def isolated(tmp_path: Path) -> dict[str, str]:
    return {
        "PALLAS_CLUSTER_DIR": str(tmp_path / "cluster"),
        "PALLAS_ETCD_PORT": str(free_port()),
        "PALLAS_ETCD_PEER_PORT": str(free_port()),
        "PALLAS_APISERVER_PORT": str(free_port()),
        "PALLAS_NODE": "0",
    }


def pids_running(pids: list[int]) -> list[int]:
    return [
        pid
        for pid in pids
        if Path(f"/proc/{pid}").exists()
        and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    ]


def test_up_with_a_port_taken_says_which_and_starts_nothing(isolated: dict[str, str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        res = run([str(HACK_LOCAL / "cluster"), "up"], {**isolated, "PALLAS_APISERVER_PORT": str(taken)})
    assert res.returncode == 1
    assert error_lines(res.stderr) == [
        f"hack/local/cluster: port {taken} (kube-apiserver) is already in use on this machine; "
        "stop what holds it, or set PALLAS_APISERVER_PORT"
    ]
    assert not (Path(isolated["PALLAS_CLUSTER_DIR"]) / "state.json").exists()


def test_up_with_a_bad_port_number_names_the_variable(isolated: dict[str, str]) -> None:
    res = run([str(HACK_LOCAL / "cluster"), "up"], {**isolated, "PALLAS_ETCD_PORT": "70000"})
    assert res.returncode == 1
    assert error_lines(res.stderr) == [
        "hack/local/cluster: PALLAS_ETCD_PORT='70000' is not a TCP port number (1-65535)"
    ]


def test_up_with_a_half_built_cache_says_so_in_one_line(isolated: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    bins = Path(
        run([str(HACK_BUILD / "k8s-bins.sh"), "--print-dir"], {"PALLAS_CACHE_DIR": str(cache)}).stdout.strip()
    )
    bins.mkdir(parents=True)
    for name in ("etcd", "kube-apiserver"):  # present but truncated, as after a killed build
        (bins / name).write_text("")
        (bins / name).chmod(0o755)
    res = run([str(HACK_LOCAL / "cluster"), "up"], {**isolated, "PALLAS_CACHE_DIR": str(cache)})
    assert res.returncode == 1
    [line] = error_lines(res.stderr)
    assert line.startswith(f"hack/local/cluster: {bins / 'etcd'} does not run"), line
    assert line.endswith("the cache is corrupt: delete it and run `make k8s-bins`"), line
    assert not (Path(isolated["PALLAS_CLUSTER_DIR"]) / "state.json").exists()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("PALLAS_NODE", "yes", "PALLAS_NODE='yes' must be 1 (a node with the control plane) or 0 (none)"),
        (
            "PALLAS_POD_CIDR",
            "192.0.2.0/24",
            "PALLAS_POD_CIDR='192.0.2.0/24' must be an IPv4 range inside 10.0.0.0/8, 172.16.0.0/12 or "
            "192.168.0.0/16 (ranges that exist only inside this machine)",
        ),
        (
            "PALLAS_SERVICE_CIDR",
            "10.244.0.0/16",
            "PALLAS_POD_CIDR 10.244.0.0/24 and PALLAS_SERVICE_CIDR 10.244.0.0/16 overlap",
        ),
        (
            "PALLAS_NODE_BRIDGE",
            "eth0;rm",
            "PALLAS_NODE_BRIDGE='eth0;rm' is not an interface name (a letter, then up to 14 of a-z 0-9 -)",
        ),
        ("PALLAS_KUBELET_PORT", "0", "PALLAS_KUBELET_PORT='0' is not a TCP port number (1-65535)"),
        ("PALLAS_NODES", "0", "PALLAS_NODES='0' must be a number of nodes from 1 to 16"),
        (
            "PALLAS_SERVICE_CIDR",
            "10.244.12.0/24",
            "the cluster's pod range 10.244.0.0/20 (PALLAS_POD_CIDR 10.244.0.0/24 and the 15 subnets after "
            "it, one per node) overlaps PALLAS_SERVICE_CIDR 10.244.12.0/24",
        ),
    ],
)
def test_bad_node_settings_are_one_line_each(
    isolated: dict[str, str], variable: str, value: str, message: str
) -> None:
    res = run([str(HACK_LOCAL / "cluster"), "up"], {**isolated, "PALLAS_NODE": "1", variable: value})
    assert res.returncode == 1
    assert error_lines(res.stderr) == [f"hack/local/cluster: {message}"]
    assert not (Path(isolated["PALLAS_CLUSTER_DIR"]) / "state.json").exists()


def test_a_second_node_on_the_machine_is_refused_and_the_first_untouched(
    isolated: dict[str, str], kube_cluster: LocalCluster
) -> None:
    env = json.loads(run([str(HACK_LOCAL / "cluster"), "env", "--json"], {}).stdout)
    if not env.get("node"):
        pytest.skip("the session cluster runs without a node")
    # Every port a node listens on is free for the second one (`localnode.settings.PORT_VARS`),
    # so what refuses it is the first node itself.
    ports = {
        "PALLAS_KUBELET_PORT",
        "PALLAS_KUBELET_HEALTHZ_PORT",
        "PALLAS_KUBE_PROXY_HEALTHZ_PORT",
        "PALLAS_KUBE_PROXY_METRICS_PORT",
        "PALLAS_NETWORK_POLICIES_METRICS_PORT",
    }
    second = {**isolated, "PALLAS_NODE": "1", **{p: str(free_port()) for p in ports}}
    res = run([str(HACK_LOCAL / "cluster"), "up"], second)
    assert res.returncode == 1
    [line] = error_lines(res.stderr)
    assert line.startswith(
        f"hack/local/cluster: another local node runs on this machine (state in {env['state_dir']})"
    )
    assert not (Path(isolated["PALLAS_CLUSTER_DIR"]) / "state.json").exists()
    assert run([str(HACK_LOCAL / "cluster"), "status"], {}).returncode == 0, (
        "the session's cluster still runs whole"
    )


def test_building_without_go_says_so_in_one_line(tmp_path: Path) -> None:
    go = shutil.which("go")
    assert go is not None, "the Go toolchain is a prerequisite of the test machine"
    # A PATH with bash and coreutils but without the Go toolchain's folder.
    path = ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "go").exists())
    res = run([str(HACK_BUILD / "k8s-bins.sh")], {"PALLAS_CACHE_DIR": str(tmp_path / "cache"), "PATH": path})
    assert res.returncode == 1
    assert error_lines(res.stderr) == [
        "hack/build/k8s-bins.sh: the Go toolchain (go ≥ 1.24) is not on PATH; "
        "install Go to build the control-plane binaries"
    ]


@pytest.fixture
def second_cluster(isolated: dict[str, str], kube_cluster: LocalCluster) -> Iterator[dict[str, str]]:
    # kube_cluster first: the binaries are built and the first cluster is up, so this proves two
    # independent clusters (state folders, ports) coexist.
    yield isolated
    run([str(HACK_LOCAL / "cluster"), "down"], isolated)


def test_up_is_idempotent_status_and_env_tell_and_down_leaves_nothing(second_cluster: dict[str, str]) -> None:
    env = second_cluster
    first = run([str(HACK_LOCAL / "cluster"), "up"], env)
    assert first.returncode == 0, first.stderr
    state = json.loads((Path(env["PALLAS_CLUSTER_DIR"]) / "state.json").read_text())
    pids = [int(p["pid"]) for p in state["processes"]]
    assert [p["name"] for p in state["processes"]] == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ]
    assert pids_running(pids) == pids

    again = run([str(HACK_LOCAL / "cluster"), "up"], env)
    assert again.returncode == 0
    assert "already running" in again.stderr
    assert json.loads((Path(env["PALLAS_CLUSTER_DIR"]) / "state.json").read_text()) == state

    status = run([str(HACK_LOCAL / "cluster"), "status"], env)
    assert status.returncode == 0, status.stdout
    assert status.stdout.count("running") == 4

    exports = run([str(HACK_LOCAL / "cluster"), "env"], env).stdout
    kubeconfig = Path(env["PALLAS_CLUSTER_DIR"]) / "kubeconfig"
    assert f"export KUBECONFIG={kubeconfig}" in exports
    shell = subprocess.run(
        ["bash", "-c", f"{exports}\nkubectl get --raw /readyz"], capture_output=True, text=True
    )
    assert shell.stdout == "ok", shell.stderr

    down = run([str(HACK_LOCAL / "cluster"), "down"], env)
    assert down.returncode == 0
    assert pids_running(pids) == []
    assert not kubeconfig.exists()
    assert (Path(env["PALLAS_CLUSTER_DIR"]) / "logs" / "kube-apiserver.log").exists()
    assert run([str(HACK_LOCAL / "cluster"), "status"], env).returncode == 3
