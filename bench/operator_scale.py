"""Operator scale benchmark against the local control plane: prints figures; not a timed test.

    .venv/bin/python bench/operator_scale.py [--agents 200 1000] [--idle 60] [--unrelated 500]

For each size, three cases, each with the operator as a `pallas operator` process watching one
namespace holding one Secret, one PallasDeployment (registry on), N PallasAgents and
`--unrelated` Secrets that no agent uses:

- `start`: the objects exist before the operator starts (an install over existing resources,
  the case that deadlocked kopf's start-up barrier); timed from the process start;
- `restart`: the same operator stopped and started again over converged objects; converged when
  /metrics says ready, every agent's event handled and the work queue empty; expect 0 writes;
- `create`: the operator runs, then the objects are created at once (concurrently, as fast as
  the API server takes them); timed from the first create.

Measured:

- convergence: from the first create until every agent has its ConfigMap, Deployment and
  Service and a status with a phase (there is no kubelet: agents stay Progressing), as the
  bench's watches see them;
- writes per agent: the operator's own writes (its `pallas_operator_api_writes_total`) plus
  kopf's patches of the custom resources (the API server's `apiserver_request_total`), over N;
- the operator process's peak RSS (VmHWM);
- the operator process's CPU time over N (`operator_cpu_ms_per_agent`, until converged; the
  API server and etcd share the cores, so wall time per agent can grow while this stays flat);
- the control plane's CPU time over N, per process (`control_plane_cpu_ms_per_agent`: etcd,
  kube-apiserver, kube-controller-manager, kube-scheduler; from /proc over the case), to see
  which of them grows faster than N when the operator does not;
- after each case the bench waits until the case's namespace is deleted, so that the next case
  does not share the control plane with that deletion (minutes at 5,000 agents);
- idle writes per minute once converged (Lease renewals reported apart: they are the HA
  heartbeat, one every 10 s whatever the load).

Targets (issues 4 and 15): 200 agents converged ≤ 60 s and 1000 ≤ 60 s in every case; ≤ 10 API
writes per agent; 0 writes after a restart; 0 writes per minute at idle apart from health-status
changes; RSS ≤ 200 MB at 1000 agents.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, Service

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent_bench import cpu_seconds  # noqa: E402

from pallas_io.kube import PallasAgent  # noqa: E402
from tests.support.operator import agent, deployment, in_namespace, secret  # noqa: E402

CRD_WRITES = ("pallasagents", "pallasdeployments")
PROFILE_DIR: Path | None = None
"""`--profile DIR`: the operator runs under py-spy (on PATH), one flame graph per case."""
PROFILE_FORMAT = "flamegraph"
"""`--profile-format`: py-spy's `flamegraph` (SVG) or `raw` (collapsed stacks, text)."""
CONVERGE_TIMEOUT = 600.0
"""`--timeout`: seconds a case may take to converge before the bench gives up on it."""


# A control plane of its own (own state directory and ports), so that tests running against the
# shared one neither disturb the figures nor get disturbed; stopped at the end if started here.
# No node: the figures are the operator's, and a thousand agent pods would swamp the machine
# (the machine's one node may also belong to another cluster).
BENCH_CLUSTER = {
    "PALLAS_CLUSTER_DIR": "/tmp/pallas-bench-cluster",
    "PALLAS_NODE": "0",
    "PALLAS_ETCD_PORT": "53790",
    "PALLAS_ETCD_PEER_PORT": "53800",
    "PALLAS_APISERVER_PORT": "56443",
}


def hack_cluster(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **BENCH_CLUSTER}
    return subprocess.run(
        [str(REPO / "hack" / "local" / "cluster"), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def cluster_env() -> dict[str, Any]:
    up = hack_cluster("up")
    if up.returncode != 0:
        sys.exit(f"hack/local/cluster up failed: {up.stderr}")
    return dict(json.loads(hack_cluster("env", "--json").stdout))


def kubectl(env: dict[str, Any], *args: str) -> str:
    cmd = [str(Path(env["bin_dir"]) / "kubectl"), f"--kubeconfig={env['kubeconfig']}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def apiserver_kopf_patches(env: dict[str, Any]) -> float:
    """PATCHes of the custom resources themselves (not /status): kopf's annotations."""
    count = 0.0
    for line in kubectl(env, "get", "--raw", "/metrics").splitlines():
        wanted = line.startswith("apiserver_request_total{") and 'verb="PATCH"' in line
        if wanted and 'subresource=""' in line and any(f'resource="{r}"' in line for r in CRD_WRITES):
            count += float(line.rsplit(" ", 1)[1])
    return count


def operator_writes(metrics: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("pallas_operator_api_writes_total{"):
            labels = line[line.index("{") + 1 : line.index("}")]
            verb = labels.split('verb="')[1].split('"')[0]
            out[verb] = out.get(verb, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def operator_pid(pid: int) -> int:
    """The operator's pid: under `--profile` that is py-spy's child, not py-spy itself."""
    if PROFILE_DIR is not None:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return int(children[0]) if children else pid
    return pid


def cpu_s(pid: int) -> float:
    """The operator's CPU time so far (user + system), to tell its share from the API server's."""
    return cpu_seconds(operator_pid(pid))


def control_plane_cpu(env: dict[str, Any]) -> dict[str, float]:
    """CPU seconds so far of each control-plane process of the bench cluster (its state file)."""
    state = json.loads((Path(env["state_dir"]) / "state.json").read_text())
    out: dict[str, float] = {}
    for proc in state.get("processes", []):
        with contextlib.suppress(OSError):  # a process that is gone has no figure
            out[str(proc["name"])] = cpu_seconds(int(proc["pid"]))
    return out


def cpu_per_agent_since(before: dict[str, float], env: dict[str, Any], n: int) -> dict[str, float]:
    """Each control-plane process's CPU since `before`, in ms per agent."""
    now = control_plane_cpu(env)
    return {name: round((now[name] - before.get(name, 0.0)) * 1000 / n, 1) for name in sorted(now)}


def peak_rss_mb(pid: int) -> float:
    """VmHWM of the operator."""
    for line in Path(f"/proc/{operator_pid(pid)}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextlib.asynccontextmanager
async def operator_process(
    env: dict[str, Any], namespace: str, port: int, profile: str | None = None
) -> AsyncIterator[subprocess.Popen[str]]:
    command = [str(Path(sys.executable).parent / "pallas"), "operator", "-n", namespace,
               "--http-port", str(port), "--lease-namespace", namespace]  # fmt: skip
    if PROFILE_DIR is not None and profile is not None:  # py-spy samples the operator into a flame graph
        raw = PROFILE_FORMAT == "raw"  # collapsed stacks: one line per stack, readable as text
        out = PROFILE_DIR / f"operator-{profile}.{'txt' if raw else 'svg'}"
        command = ["py-spy", "record", "--nonblocking", "--rate", "50", "--format", PROFILE_FORMAT,
                   "-o", str(out), "--", *command]  # fmt: skip
    proc = subprocess.Popen(
        command,
        env={**os.environ, "KUBECONFIG": env["kubeconfig"]},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        async with httpx2.AsyncClient(timeout=2) as http:
            for _ in range(300):
                with contextlib.suppress(httpx2.TransportError):
                    if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
        yield proc
    finally:
        # To the whole group: the operator stops on SIGINT, py-spy then writes its graph.
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)


CHILDREN_SELECTOR: dict[str, Any] = {
    "app.kubernetes.io/managed-by": "pallas-operator",
    "app.kubernetes.io/component": "agent",
}


async def until_converged(client: AsyncClient, namespace: str, names: list[str], started: float) -> float:
    """Seconds from `started` until every agent has all three children and a status.

    Watched, not polled: listing 4 x N objects every half second loaded the API server that the
    operator waits on, and took a fifth of a core in the bench itself, on the two cores they all
    share (1000 agents, `start`: 54.8 s polled, 47.4 s watched, one run each on a quiet machine).
    """
    keys = ("ConfigMap", "Deployment", "Service", "status")
    wanted = set(names)
    present: dict[str, set[str]] = {name: set() for name in names}  # agent -> keys it has
    complete: set[str] = set()
    done = asyncio.Event()

    async def follow(resource: Any, key: str, labels: dict[str, Any] | None) -> None:
        # A watch without a resourceVersion starts with an ADDED event for every existing object.
        async for event, obj in client.watch(resource, namespace=namespace, labels=labels):
            name = obj.metadata.name if obj.metadata is not None else None
            agent = name.removesuffix("-config") if name and resource is ConfigMap else name
            if agent not in wanted:
                continue
            there = event != "DELETED"
            if resource is PallasAgent:
                there = there and bool((obj.status or {}).get("phase"))
            # Each event is O(1): the bench shares the cores with what it measures.
            (present[agent].add if there else present[agent].discard)(key)
            (complete.add if len(present[agent]) == len(keys) else complete.discard)(agent)
            if len(complete) == len(wanted):
                done.set()

    watches = [
        asyncio.create_task(follow(ConfigMap, "ConfigMap", CHILDREN_SELECTOR)),
        asyncio.create_task(follow(Deployment, "Deployment", CHILDREN_SELECTOR)),
        asyncio.create_task(follow(Service, "Service", CHILDREN_SELECTOR)),
        asyncio.create_task(follow(PallasAgent, "status", None)),
    ]
    try:
        remaining = CONVERGE_TIMEOUT - (time.monotonic() - started)
        async with asyncio.timeout(remaining):
            await done.wait()
    except TimeoutError:
        counts = {key: sum(key in have for have in present.values()) for key in keys}
        seconds = f"{CONVERGE_TIMEOUT:.0f} s"
        raise SystemExit(f"{len(names)} agents: not converged after {seconds} ({counts})") from None
    finally:
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
    return time.monotonic() - started


def metric(metrics: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`."""
    out = 0.0
    for line in metrics.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            out += float(line.rsplit(" ", 1)[1])
    return out


def reconciles_per_agent(metrics: str, n: int) -> float:
    """Agent reconciles run so far, over the number of agents."""
    return round(metric(metrics, "pallas_operator_reconcile_total", kind="agent") / n, 2)


def objects_of(namespace: str, names: list[str], unrelated: int) -> list[dict[str, Any]]:
    mod = in_namespace(namespace)
    return [
        secret("llm", None, mod),
        deployment("ouranos", mod),
        *(secret(f"unrelated-{i:04d}", {"token": str(i)}, mod) for i in range(unrelated)),
        *(agent(name, mod) for name in names),
    ]


async def create_all(client: AsyncClient, objects: list[dict[str, Any]]) -> None:
    limit = asyncio.Semaphore(32)

    async def create(obj: dict[str, Any]) -> None:
        async with limit:
            await client.create(from_dict(obj))

    await asyncio.gather(*(create(o) for o in objects))


async def delete_namespace(client: AsyncClient, namespace: str) -> None:
    """Delete the case's namespace and wait until it is gone.

    Deleting N agents' objects (and the controller-manager's ReplicaSets and Pods) takes the
    control plane minutes at 5,000; a next case started meanwhile shares the cores with it, and
    its figures (the control plane's CPU per agent above all) would carry the deletion's load.
    """
    await client.delete(Namespace, namespace)
    deadline = time.monotonic() + CONVERGE_TIMEOUT
    while time.monotonic() < deadline:
        try:
            await client.get(Namespace, namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return
            raise
        await asyncio.sleep(2)
    print(f"namespace {namespace} still terminating after {CONVERGE_TIMEOUT:.0f} s", file=sys.stderr)


async def run_existing(env: dict[str, Any], n: int, unrelated: int) -> list[dict[str, Any]]:
    """The `start` and `restart` cases: the objects exist before the operator starts."""
    client = AsyncClient(config=KubeConfig.from_file(env["kubeconfig"]), field_manager="bench")
    namespace = f"bench-start-{n}-{secrets.token_hex(3)}"
    await client.create(Namespace(metadata=ObjectMeta(name=namespace)))
    port = 19000 + n % 1000
    names = [f"agent-{i:04d}" for i in range(n)]
    results = []
    try:
        await create_all(client, objects_of(namespace, names, unrelated))
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        started = time.monotonic()
        control_plane = control_plane_cpu(env)
        operator = operator_process(env, namespace, port, f"start-{n}")
        async with operator as proc, httpx2.AsyncClient(timeout=5) as http:
            converge = await until_converged(client, namespace, names, started)
            control_plane_ms = cpu_per_agent_since(control_plane, env, n)
            await asyncio.sleep(5)
            text = (await http.get(metrics_url)).text
            writes = operator_writes(text)
            results.append({
                "case": "start", "agents": n, "unrelated_secrets": unrelated,
                "converged_s": round(converge, 1), "writes_per_agent": round(sum(writes.values()) / n, 2),
                "reconciles_per_agent": reconciles_per_agent(text, n),
                "operator_cpu_ms_per_agent": round(cpu_s(proc.pid) * 1000 / n, 1),
                "control_plane_cpu_ms_per_agent": control_plane_ms,
                "peak_rss_mb": round(peak_rss_mb(proc.pid), 1),
            })  # fmt: skip
        started = time.monotonic()
        operator = operator_process(env, namespace, port, f"restart-{n}")
        async with operator as proc, httpx2.AsyncClient(timeout=5) as http:
            while True:
                text = (await http.get(metrics_url)).text
                events = "pallas_operator_watch_events_total"
                handled = metric(text, events, kind="PallasAgent", stage="handled")
                depth = metric(text, "pallas_operator_queue_depth")
                if metric(text, "pallas_operator_ready") == 1 and handled >= n and depth == 0:
                    break
                if time.monotonic() - started > CONVERGE_TIMEOUT:
                    raise SystemExit(f"restart with {n} agents: not converged after {CONVERGE_TIMEOUT:.0f} s")
                await asyncio.sleep(0.2)
            converge = time.monotonic() - started
            await asyncio.sleep(5)
            writes = operator_writes((await http.get(metrics_url)).text)
            results.append({
                "case": "restart", "agents": n, "unrelated_secrets": unrelated,
                "converged_s": round(converge, 1), "writes": int(sum(writes.values())),
                "operator_cpu_ms_per_agent": round(cpu_s(proc.pid) * 1000 / n, 1),
                "peak_rss_mb": round(peak_rss_mb(proc.pid), 1),
            })  # fmt: skip
        return results
    finally:
        await delete_namespace(client, namespace)
        await client.close()


async def run_size(env: dict[str, Any], n: int, idle: float) -> dict[str, Any]:
    client = AsyncClient(config=KubeConfig.from_file(env["kubeconfig"]), field_manager="bench")
    namespace = f"bench-{n}-{secrets.token_hex(3)}"
    await client.create(Namespace(metadata=ObjectMeta(name=namespace)))
    port = 18000 + n % 1000
    names = [f"agent-{i:04d}" for i in range(n)]
    try:
        async with operator_process(env, namespace, port) as proc, httpx2.AsyncClient(timeout=5) as http:
            metrics_url = f"http://127.0.0.1:{port}/metrics"
            kopf_before = apiserver_kopf_patches(env)
            objects = objects_of(namespace, names, 0)
            control_plane = control_plane_cpu(env)
            started = time.monotonic()
            await create_all(client, objects)
            created = time.monotonic() - started
            converge = await until_converged(client, namespace, names, started)
            control_plane_ms = cpu_per_agent_since(control_plane, env, n)
            cpu = cpu_s(proc.pid)  # the operator's start-up included: a few seconds at any N
            await asyncio.sleep(5)  # let the Deployment controller's status updates play out
            text = (await http.get(metrics_url)).text
            writes = operator_writes(text)
            kopf = apiserver_kopf_patches(env) - kopf_before
            idle_start = (sum(writes.values()), apiserver_kopf_patches(env))
            await asyncio.sleep(idle)
            after = operator_writes((await http.get(metrics_url)).text)
            idle_writes = sum(after.values()) - idle_start[0] + apiserver_kopf_patches(env) - idle_start[1]
            return {
                "case": "create",
                "agents": n,
                "create_s": round(created, 1),
                "converged_s": round(converge, 1),
                "writes_per_agent": round((sum(writes.values()) + kopf) / n, 2),
                "writes_by_verb": {**{k: int(v) for k, v in writes.items()}, "kopf-patch": int(kopf)},
                "reconciles_per_agent": reconciles_per_agent(text, n),
                "operator_cpu_ms_per_agent": round(cpu * 1000 / n, 1),
                "control_plane_cpu_ms_per_agent": control_plane_ms,
                "peak_rss_mb": round(peak_rss_mb(proc.pid), 1),
                "idle_writes_per_min": round(idle_writes * 60 / idle, 2),
                "lease_renewals_per_min": 6.0,
            }
    finally:
        await delete_namespace(client, namespace)
        await client.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idling measured")
    parser.add_argument("--unrelated", type=int, default=500, help="Secrets no agent uses (start/restart)")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the bench control plane running")
    parser.add_argument("--profile", type=Path, help="py-spy the operator into DIR/*.svg")
    parser.add_argument("--profile-format", choices=["flamegraph", "raw"], default="flamegraph")
    parser.add_argument("--cases", nargs="+", default=["existing", "create"], choices=["existing", "create"])
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a case may take to converge")
    args = parser.parse_args()
    global PROFILE_DIR, PROFILE_FORMAT, CONVERGE_TIMEOUT
    PROFILE_DIR, PROFILE_FORMAT, CONVERGE_TIMEOUT = args.profile, args.profile_format, args.timeout
    was_running = hack_cluster("status").returncode == 0
    env = cluster_env()
    try:
        kubectl(env, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        for n in args.agents:
            if "existing" in args.cases:
                for result in await run_existing(env, n, args.unrelated):
                    print(json.dumps(result), flush=True)
            if "create" in args.cases:
                print(json.dumps(await run_size(env, n, args.idle)), flush=True)
    finally:
        if not was_running and not args.keep_cluster:
            hack_cluster("down")


if __name__ == "__main__":
    asyncio.run(main())
