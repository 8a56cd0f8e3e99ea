"""The pieces the e2e tests run the whole product with, each cleaned up fully when it stops.

- `LoopThread`: an asyncio loop in a thread of its own for the in-process servers (the fake LLM,
  header-echo MCP servers). Agent pods call them at any moment, not only while a test's own
  event loop happens to run, so they must not live in that loop.
- `start_dev_kubelet(...)`: hack/dev-kubelet as a subprocess serving a node of its own (no taint),
  with the real /etc/hosts, so agent pods, the operator and the tests all resolve Service names.
  `DevKubeletProcess.stop()` sends SIGTERM and waits (it stops its containers, removes its hosts
  block), then deletes the Node and its Lease.
- `start_operator(...)`: `pallas operator --namespace NS` as a subprocess with the admin
  kubeconfig and no service-host map: it reaches agents by their cluster DNS names through the
  hosts block.
- `create_namespace` / `delete_namespace`: a namespace for a whole module; deleting waits until it
  is gone (the dev kubelet must still run then: it finalizes the pods).
- `until(what, probe, within)`: poll a probe (sync or async) until it returns something truthy;
  on timeout the failure names what did not happen, the last value seen and any diagnostics.
- `scrape(url)`: GET a Prometheus text endpoint and parse it (prometheus_client's parser).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, ServiceAccount
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster import REPO, LocalCluster
from tests.support.mcp_peers import free_port

T = TypeVar("T")
DEV_KUBELET = REPO / "hack" / "dev-kubelet"
PALLAS = Path(sys.executable).parent / "pallas"


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file ('' if it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --- waiting --------------------------------------------------------------------------------


async def until(
    what: str,
    probe: Callable[[], Any],
    within: float,
    *,
    interval: float = 0.25,
    diagnose: Callable[[], str] | None = None,
) -> Any:
    """Poll `probe` (sync or async) until it returns something truthy, and return that.

    On timeout the test fails with `what` did not happen, the last value and `diagnose()`.
    """
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = probe()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if time.monotonic() > deadline:
            extra = f"\n{diagnose()}" if diagnose is not None else ""
            pytest.fail(f"{what} did not happen within {within:g}s (last: {last!r}){extra}", pytrace=False)
        await asyncio.sleep(interval)


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


# --- the stand-in kubelet -------------------------------------------------------------------


@dataclass
class DevKubeletProcess:
    """A running hack/dev-kubelet serving `node`."""

    process: subprocess.Popen[bytes]
    node: str
    cidr: str
    state_dir: Path
    log: Path
    cluster: LocalCluster

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log, lines)

    def pod_log(self, namespace: str, pod: str, container: str, lines: int = 30) -> str:
        """What a container printed (the dev kubelet keeps it in the pod's state folder)."""
        return tail(self.state_dir / "pods" / f"{namespace}_{pod}" / f"{container}.log", lines)

    def stop(self) -> None:
        """SIGTERM, wait until it stopped its containers and left; then remove its Node and Lease."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
            try:
                code = self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.send_signal(signal.SIGTERM)  # a second one kills every container at once
                try:
                    self.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
                raise AssertionError(f"the dev kubelet did not stop on SIGTERM:\n{self.log_tail()}") from None
            if code != 0:
                raise AssertionError(f"the dev kubelet exited with {code}:\n{self.log_tail()}")
        finally:
            self.cluster.kubectl(
                "delete", "node", self.node, "--ignore-not-found", "--wait=false", check=False
            )
            self.cluster.kubectl(
                "delete", "lease", "-n", "kube-node-lease", self.node, "--ignore-not-found", check=False
            )


def start_dev_kubelet(cluster: LocalCluster, folder: Path, node: str, cidr: str) -> DevKubeletProcess:
    """Start hack/dev-kubelet for `node` (no taint, real /etc/hosts) and wait until the node is Ready."""
    log = folder / "dev-kubelet.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(DEV_KUBELET),
                f"--kubeconfig={cluster.kubeconfig}",
                f"--node-name={node}",
                f"--state-dir={folder / 'state'}",
                f"--pod-cidr={cidr}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    kubelet = DevKubeletProcess(process, node, cidr, folder / "state", log, cluster)
    client = Client(config=cluster.config(), field_manager="pallas-tests")

    def node_ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the dev kubelet exited ({process.returncode}):\n{kubelet.log_tail()}")
        with contextlib.suppress(ApiError):
            conditions = client.get(Node, node).status.conditions or []
            taints = {t.key for t in client.get(Node, node).spec.taints or []}
            ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
            return ready and "node.kubernetes.io/not-ready" not in taints
        return False

    try:
        wait_for(f"node {node} Ready (the dev kubelet registering it)", node_ready, 30)
    except BaseException:
        kubelet.stop()
        raise
    finally:
        client.close()
    return kubelet


# --- the operator ---------------------------------------------------------------------------


@dataclass
class OperatorProcess:
    """A running `pallas operator` process."""

    process: subprocess.Popen[bytes]
    log: Path
    http_port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log, lines)

    def stop(self) -> None:
        """SIGTERM (the operator releases its Lease and exits 0); SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the operator did not stop on SIGTERM:\n{self.log_tail()}") from None
        if code != 0:
            raise AssertionError(f"the operator exited with {code}:\n{self.log_tail()}")


def start_operator(cluster: LocalCluster, namespace: str, folder: Path) -> OperatorProcess:
    """`pallas operator --namespace NS` (Lease in NS, HTTP on a free loopback port) until /readyz is 200."""
    port = free_port()
    log = folder / "operator.log"
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PALLAS_BIND_HOST": "127.0.0.1",  # its /metrics on loopback, never the wildcard address
        "PALLAS_RUNTIME_IMAGE": "pallas:e2e",
    }
    env.pop("PALLAS_SERVICE_HOST_OVERRIDES", None)
    args = ["operator", "--namespace", namespace, "--lease-namespace", namespace, "--http-port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(PALLAS), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    operator = OperatorProcess(process, log, port)

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the operator exited ({process.returncode}):\n{operator.log_tail()}")
        try:
            return httpx2.get(f"{operator.base_url}/readyz", timeout=2).status_code == 200
        except httpx2.TransportError:
            return False

    try:
        wait_for("the operator's /readyz answering 200", ready, 40)
    except BaseException:
        with contextlib.suppress(AssertionError):
            operator.stop()
        raise
    return operator


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


def delete_namespace(cluster: LocalCluster, name: str, timeout: float = 120) -> None:
    """Delete the namespace and wait until it is gone."""
    res = cluster.kubectl(
        "delete",
        "namespace",
        name,
        "--ignore-not-found",
        "--wait=true",
        f"--timeout={timeout:g}s",
        check=False,
    )
    if res.returncode != 0:
        left = cluster.kubectl("get", "all", "-n", name, "-o", "wide", check=False).stdout
        raise AssertionError(f"namespace {name} was not deleted within {timeout:g}s: {res.stderr}\n{left}")


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
