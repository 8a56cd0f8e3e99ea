"""The pieces the e2e tests run the whole product with, each cleaned up fully when it stops.

- `LoopThread`: an asyncio loop in a thread of its own for the in-process servers (the fake LLM,
  header-echo MCP servers). Agent pods call them at any moment, not only while a test's own
  event loop happens to run, so they must not live in that loop.
- `local_node(cluster)`: the real node hack/local/cluster runs (its name, bridge address and
  containerd), with the project's image built by hack/build/image and imported into it. This machine
  resolves cluster names through the cluster DNS (hack/local/cluster sets that up), so the tests reach
  agents and the registry by their Service names, as a client in the cluster would.
- `install_operator(...)`: `helm install` of charts/pallas with that image, namespace-scoped; the
  operator runs as a pod and reaches agents by their cluster DNS names.
- `create_namespace` / `delete_namespace`: a namespace for a whole module; its deletion (the kubelet
  stopping the pods, which drain) is awaited when the worker's session ends, not by the module, so
  the next module starts at once.
- `until(what, probe, within)` (`tests.support.waiting`'s): poll a probe (sync or async) until it
  returns something truthy; on timeout the failure names what did not happen, the last value seen
  and any diagnostics.
- `scrape(url)`: GET a Prometheus text endpoint and parse it (prometheus_client's parser).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster import HACK_CLUSTER, REPO, LocalCluster, await_deletion_later
from tests.support.waiting import until as until  # the e2e tests' waiting, re-exported

T = TypeVar("T")
HACK_IMAGE = REPO / "hack" / "build" / "image"
PALLAS = Path(sys.executable).parent / "pallas"


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file ('' if it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --- waiting --------------------------------------------------------------------------------


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.25) -> T:
    """The blocking `until`, for fixtures."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s (last: {last!r})")
        time.sleep(interval)


# --- a loop for in-process servers ----------------------------------------------------------


class LoopThread:
    """An asyncio loop running in a daemon thread; async context managers entered in it stay up
    until `close()`, which exits them in reverse order and stops the loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="e2e-servers", daemon=True)
        self._thread.start()
        self._entered: list[AbstractAsyncContextManager[Any]] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run a coroutine in the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def enter(self, manager: AbstractAsyncContextManager[T]) -> T:
        """Enter an async context manager in the loop; it is exited by `close()`."""
        value = self.run(manager.__aenter__())
        self._entered.append(manager)
        return value

    def close(self) -> None:
        errors = []
        while self._entered:
            manager = self._entered.pop()
            try:
                self.run(manager.__aexit__(None, None, None), timeout=30)
            except Exception as exc:  # keep stopping the others
                errors.append(exc)
        with contextlib.suppress(Exception):  # what the servers left running (SSE watchers)
            self.run(_cancel_others(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()
        if errors:
            raise errors[0]


async def _cancel_others() -> None:
    current = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


# --- the local node -----------------------------------------------------------------------


@dataclass(frozen=True)
class LocalNode:
    """The real node hack/local/cluster runs beside the control plane, with the project's image in it."""

    name: str
    ip: str
    """The node's bridge address: where pods reach this machine (the tests' servers listen here)."""
    containerd_address: str
    image: str
    """The project's image (`localhost/pallas:<hash>`), imported into the node's containerd."""
    pod_cidr: str = ""
    """The node's pod range: where connections from pods come from."""
    cluster_cidr: str = ""
    """The pod range of every node: where connections from any pod come from."""
    nodes: tuple[dict[str, str], ...] = ()
    """Every node of the cluster (`hack/local/cluster env --json`): name, address, containerd,
    network namespace (empty for the first)."""

    def container_pid(self, container_id: str) -> int:
        """The host pid of a container's main process (`containerd://<id>` from a pod status),
        whichever node's containerd runs it."""
        task = container_id.removeprefix("containerd://")
        seen = []
        for address in [n["containerd_address"] for n in self.nodes] or [self.containerd_address]:
            res = subprocess.run(
                ["ctr", "--address", address, "--namespace", "k8s.io", "tasks", "list"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            for line in res.stdout.splitlines()[1:]:
                parts = line.split()
                if parts and parts[0] == task:
                    return int(parts[1])
            seen.append(res.stdout)
        raise AssertionError(f"no node's containerd runs task {task}:\n" + "\n".join(seen))


def local_node() -> LocalNode:
    """The session cluster's node, and the project's image built (if the tree changed) and loaded."""
    res = subprocess.run([str(HACK_CLUSTER), "env", "--json"], capture_output=True, text=True, timeout=60)
    env = json.loads(res.stdout or "{}")
    node = env.get("node")
    if not node:
        pytest.fail(
            "the e2e tests need the local node (hack/local/cluster up without PALLAS_NODE=0)", pytrace=False
        )
    image = subprocess.run([str(HACK_IMAGE), "load"], capture_output=True, text=True, timeout=1800)
    if image.returncode != 0:
        pytest.fail(f"hack/build/image load failed:\n{image.stderr[-3000:]}", pytrace=False)
    return LocalNode(
        node["node_name"],
        node["node_ip"],
        node["containerd_address"],
        image.stdout.strip(),
        node["pod_cidr"],
        node.get("cluster_cidr", node["pod_cidr"]),
        tuple(env.get("nodes") or ()),
    )


# --- the operator, installed with the chart ----------------------------------------------------


@dataclass
class OperatorRelease:
    """`helm install` of charts/pallas: the operator as a pod of the project's image, watching
    (and granted rights in) one namespace."""

    cluster: LocalCluster
    namespace: str
    release: str = "pallas"

    @property
    def deployment(self) -> str:
        return f"{self.release}-operator"

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        helm = Path(self.cluster.kubectl_path).with_name("helm")
        return subprocess.run(
            [str(helm), f"--kubeconfig={self.cluster.kubeconfig}", "--namespace", self.namespace, *args],
            capture_output=True,
            text=True,
            timeout=300,
        )

    def log_tail(self, lines: int = 40) -> str:
        res = self.cluster.kubectl(
            "logs", "-n", self.namespace, f"deployment/{self.deployment}", f"--tail={lines}", check=False
        )
        return res.stdout + res.stderr

    def uninstall(self) -> None:
        # Not `--wait`: the cluster-scoped objects the next release needs free are gone when helm
        # returns; the operator pod's own termination need not hold up the next module.
        res = self.helm("uninstall", self.release, "--timeout", "90s")
        if res.returncode != 0:
            raise AssertionError(f"helm uninstall failed: {res.stderr}")


def install_operator(
    cluster: LocalCluster, namespace: str, image: str, extra: dict[str, str] | None = None
) -> OperatorRelease:
    """The chart with the node's image (never pulled), namespace-scoped RBAC, CRDs left to the
    caller, and `extra` values (`--set` paths); waits until the operator pod is ready."""
    release = OperatorRelease(cluster, namespace)
    repository, tag = image.rsplit(":", 1)
    values = {
        "fullnameOverride": release.release,
        "crds.enabled": "false",
        "rbac.scope": "namespace",
        "watchNamespaces[0]": namespace,
        "image.repository": repository,
        "image.tag": tag,
        "image.pullPolicy": "Never",
        **(extra or {}),
    }
    sets = [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]
    chart = str(REPO / "charts" / "pallas")
    res = release.helm("upgrade", "--install", release.release, chart, *sets, "--wait", "--timeout", "120s")
    if res.returncode != 0:
        pods = cluster.kubectl("get", "pods,events", "-n", namespace, check=False).stdout
        logs = release.log_tail()
        # A failed install still made the chart's cluster-scoped objects (its ClusterRoles),
        # which would refuse the next module's release: remove it before failing.
        release.helm("uninstall", release.release, "--wait", "--timeout", "90s")
        raise AssertionError(f"helm install failed: {res.stderr}\n{pods}\n{logs}")
    return release


# --- manifests ------------------------------------------------------------------------------


def quiet_deployment(
    namespace: str, name: str, llm_url: str, model: str, **spec: Any
) -> list[dict[str, Any]]:
    """A Secret `llm` and a PallasDeployment `name` on the fake LLM at `llm_url`: no registry,
    health checked every 5 s, one retry; `spec` adds to (or replaces) the deployment's fields."""
    meta = {"namespace": namespace}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "llm", **meta},
            "stringData": {"KEY": "sk-x"},
        },
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasDeployment",
            "metadata": {"name": name, **meta},
            "spec": {
                "model": {"default": f"llm.{model}"},
                "providers": {
                    "llm": {
                        "type": "openai",
                        "baseURL": llm_url,
                        "apiKey": {"secretKeyRef": {"name": "llm", "key": "KEY"}},
                        "maxRetries": 1,
                    }
                },
                "registry": {"enabled": False},
                "healthCheck": {"intervalSeconds": 5, "timeoutSeconds": 2},
                "runtime": {"env": [{"name": "FASTMCP_CHECK_FOR_UPDATES", "value": "off"}]},
                **spec,
            },
        },
    ]


def agent_on_node(namespace: str, name: str, deployment: str, node: str, **spec: Any) -> dict[str, Any]:
    """A PallasAgent of `deployment` whose pods run on `node` (by hostname); `spec` adds fields."""
    placement = {"nodeSelector": {"kubernetes.io/hostname": node}}
    body = {"deployment": deployment, "pod": placement, **spec}
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": "pallas.dev/v1alpha1", "kind": "PallasAgent", "metadata": meta, "spec": body}


# --- a namespace for a module ---------------------------------------------------------------


def create_namespace(cluster: LocalCluster, name: str) -> None:
    """Create the namespace (labelled as a test's) and wait for its default ServiceAccount."""
    with Client(config=cluster.config(), field_manager="pallas-tests") as client:
        client.create(Namespace(metadata=ObjectMeta(name=name, labels={"pallas.dev/test": "true"})))

        def has_default_account() -> bool:
            try:
                client.get(ServiceAccount, "default", namespace=name)
            except ApiError:
                return False
            return True

        wait_for(f"the default ServiceAccount of {name}", has_default_account, 30, interval=0.1)


@contextlib.contextmanager
def module_namespace(cluster: LocalCluster, prefix: str) -> Iterator[str]:
    """A new namespace `t-e2e-<prefix>-<hex>` for a module, deleted (later) when it ends."""
    name = f"t-e2e-{prefix}-{secrets.token_hex(3)}"
    create_namespace(cluster, name)
    try:
        yield name
    finally:
        delete_namespace(cluster, name)


def delete_namespace(cluster: LocalCluster, name: str) -> None:
    """Ask for the namespace's deletion; it is awaited once, when the worker's session ends."""
    res = cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false", check=False)
    if res.returncode != 0:
        raise AssertionError(f"namespace {name} could not be deleted: {res.stderr}")
    await_deletion_later(name)


# --- Prometheus -----------------------------------------------------------------------------


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, by (name, labels)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(url: str) -> Samples:
    """GET a /metrics endpoint (Prometheus text format) and parse it."""
    response = httpx2.get(url, timeout=5)
    response.raise_for_status()
    return parse_metrics(response.text)


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the one sample with exactly these labels, if present."""
    return samples.get((name, frozenset(labels.items())))
