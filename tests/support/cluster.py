"""The real local cluster for integration and e2e tests.

`kube_cluster` starts the control plane with hack/local/cluster (or reuses one that runs already) and
stops it at the end of the session only if it started it. It runs two nodes (`PALLAS_TEST_NODES`,
default 2; none with PALLAS_NODE=0): the e2e tests see replicas spread and traffic cross nodes, and
a running one-node cluster (`make demo`'s) gets its second node added. `PALLAS_KUBECONFIG=/path` points the
tests at an existing cluster instead; `PALLAS_KEEP_CLUSTER=1` leaves a started one running.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lightkube import ApiError, AsyncClient, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount

from tests.support.workers import run_dir, run_lock

REPO = Path(__file__).resolve().parents[2]
HACK_CLUSTER = REPO / "hack" / "local" / "cluster"
# Pods of a namespace with this annotation are never scheduled onto the local node (the API server
# runs the PodNodeSelector admission plugin and no node has the label), so an integration test
# plays the kubelet itself (`make_pods_ready`) as on a control plane without nodes. The e2e tests
# use namespaces without it: their pods run as containers.
NO_NODE = {"scheduler.alpha.kubernetes.io/node-selector": "pallas.dev/node=none"}


@dataclass(frozen=True)
class LocalCluster:
    """Where the control plane is and how to reach it."""

    kubeconfig: Path
    kubectl_path: str

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; on failure the error names the command and its stderr."""
        res = subprocess.run(
            [self.kubectl_path, f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
        return res

    def config(self) -> KubeConfig:
        return KubeConfig.from_file(self.kubeconfig)


def _hack_cluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HACK_CLUSTER), *args], capture_output=True, text=True, timeout=600)


# Written by the process that started the control plane; the run's controller (the process that
# outlives every xdist worker) reads it in `stop_started_cluster` and stops the cluster then.
STARTED_MARK = "cluster-started"


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[LocalCluster]:
    external = os.environ.get("PALLAS_KUBECONFIG")
    if external:
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            pytest.fail("PALLAS_KUBECONFIG is set but kubectl is not on PATH")
        yield LocalCluster(Path(external), kubectl)
        return

    nodes = (
        [] if os.environ.get("PALLAS_NODE") == "0" else ["--nodes", os.environ.get("PALLAS_TEST_NODES", "2")]
    )
    # One worker starts the cluster; the others wait here and then reuse it (`up` of a running
    # cluster returns at once). None of them stops it: a worker cannot know that the others are done.
    with run_lock("cluster"):
        was_running = _hack_cluster("status").returncode == 0
        up = _hack_cluster("up", *nodes)
        if up.returncode != 0:
            pytest.fail(f"hack/local/cluster up failed:\n{up.stderr}", pytrace=False)
        if not was_running:
            (run_dir() / STARTED_MARK).touch()
    env = json.loads(_hack_cluster("env", "--json").stdout)
    cluster = LocalCluster(Path(env["kubeconfig"]), str(Path(env["bin_dir"]) / "kubectl"))
    yield cluster
    _await_deletions(cluster)


# Namespaces this process deleted: their deletion is awaited once, when the process's session
# ends, so no test waits for another's clean-up and the next run starts on an empty cluster (a
# cluster-wide operator indexes whatever is left).
_DELETING: list[str] = []
DELETED_WITHIN = 180.0


def await_deletion_later(name: str) -> None:
    """Count a namespace this process asked to delete among those awaited when its session ends."""
    _DELETING.append(name)


def _await_deletions(cluster: LocalCluster) -> None:
    client = Client(config=cluster.config(), field_manager="pallas-tests")
    deadline = time.monotonic() + DELETED_WITHIN
    try:
        while _DELETING:
            try:
                client.get(Namespace, _DELETING[-1])
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
                _DELETING.pop()
                continue
            if time.monotonic() > deadline:
                pytest.fail(f"namespaces not deleted within {DELETED_WITHIN:g}s: {', '.join(_DELETING)}")
            time.sleep(0.5)
    finally:
        client.close()


def stop_started_cluster() -> None:
    """At the end of the run: stop the control plane if this run started it (not with
    PALLAS_KEEP_CLUSTER=1, nor one that ran before the run)."""
    mark = run_dir() / STARTED_MARK
    if mark.exists() and not os.environ.get("PALLAS_KEEP_CLUSTER"):
        _hack_cluster("down")
        mark.unlink()


@pytest.fixture
def namespace(kube_cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards (the namespace controller empties it);
    its pods are not run (`NO_NODE`)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{secrets.token_hex(3)}"
    client = Client(config=kube_cluster.config(), field_manager="pallas-tests")
    meta = ObjectMeta(name=name, labels={"pallas.dev/test": "true"}, annotations=NO_NODE)
    client.create(Namespace(metadata=meta))
    # Pods are refused until the serviceaccount controller made the default ServiceAccount.
    deadline = time.monotonic() + 30
    while True:
        try:
            client.get(ServiceAccount, "default", namespace=name)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        yield name
    finally:
        try:
            client.delete(Namespace, name)
            await_deletion_later(name)
        except ApiError as exc:
            if exc.status.code != 404:  # gone already: the test deleted it itself
                raise
        finally:
            client.close()


@pytest.fixture
async def kube_client(kube_cluster: LocalCluster) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(config=kube_cluster.config(), field_manager="pallas-tests")
    try:
        yield client
    finally:
        await client.close()
