"""`helm install` of charts/pallas on the local control plane makes a working operator.

The operator pod never runs here: the chart's default image (`pallas:0.1.0`) is not in the local
node, and nothing is ever pulled (tests/e2e installs the chart with the image built here). The
test runs what it would run: the Deployment's own `args` as a local `pallas` process, logged in
with a token of the chart's ServiceAccount, so every request the operator makes is authorised by
the chart's RBAC alone.

CRDs: they are cluster-scoped and other tests server-side apply `crds/` into the same cluster,
so the release may find them present. `helm install --take-ownership` adopts them (the chart's
CRD templates are `crds/` plus labels and the keep annotation); uninstalling then proves that
`crds.keep` leaves them in place. `crds/` is applied again at the end, so whatever runs next sees
exactly the generated CRDs, not the chart's copy.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pallas_api import names
from pallas_operator.operator_rbac import CLUSTER_RULES
from tests.support.cluster import NO_NODE, REPO, LocalCluster
from tests.support.operator import CRDS, install_crds
from tests.support.ports import logged_port

CHART = REPO / "charts" / "pallas"
EXAMPLE = REPO / "examples" / "local-agents.yaml"
PALLAS = Path(sys.executable).with_name("pallas")
CRD_NAMES = ("pallasagents.pallas.dev", "pallasdeployments.pallas.dev")
CRD_WATCH_REFUSALS = re.compile(
    # With rbac.scope=namespace kopf may not follow CRDs (a cluster-wide read the chart leaves
    # out): it retries, then warns and keeps the CRDs it found at start (templates/_rbac-rules.tpl).
    # Its log line names the URL with its query: `?limit=500` since it lists in pages
    # (`wiring.LIST_PAGE`), `?watch=true&…` for the watch.
    r"/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions(\?\S*)? -> APIForbiddenError"
    r"|Not enough permissions to watch for resources"
)


def _helm_binary() -> Path:
    out = subprocess.run(
        [str(REPO / "hack" / "build" / "k8s-bins.sh"), "--print-dir"],
        capture_output=True,
        text=True,
        check=True,
    )
    helm = Path(out.stdout.strip()) / "helm"
    if not helm.is_file():
        pytest.fail(f"{helm} is missing: run `make k8s-bins` (hack/build/k8s-bins.sh)")
    return helm


class Helm:
    """helm against the test cluster, with its caches in a directory of the test's own."""

    def __init__(self, cluster: LocalCluster, home: Path) -> None:
        self.binary = str(_helm_binary())
        self.env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(self, *args: str) -> str:
        res = subprocess.run([self.binary, *args], capture_output=True, text=True, env=self.env, timeout=120)
        if res.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout


def _get(cluster: LocalCluster, *args: str) -> dict[str, Any] | None:
    """`kubectl get ... -o json` as the admin; None when the object does not exist."""
    res = cluster.kubectl("get", *args, "-o", "json", check=False)
    if res.returncode != 0:
        if "NotFound" in res.stderr:
            return None
        raise AssertionError(f"kubectl get {' '.join(args)}: {res.stderr.strip()}")
    return dict(json.loads(res.stdout))


def _wait_for(check: Callable[[], Any], within: float, what: str, log: Path | None = None) -> Any:
    deadline = time.monotonic() + within
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            tail = "" if log is None else "\noperator log:\n" + log.read_text()[-4000:]
            pytest.fail(f"{what} did not happen within {within}s{tail}", pytrace=False)
        time.sleep(0.25)


def _service_account_kubeconfig(cluster: LocalCluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (server and CA from the admin's)."""
    token = cluster.kubectl("create", "token", account, "-n", namespace, "--duration=10m").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    entry = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [entry],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": entry["name"], "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _local_args(deployment: dict[str, Any], http_port: int) -> list[str]:
    """The operator container's args, with the metrics port moved to a free local one."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = list(container["args"])
    assert args[0] == "operator", f"the container does not run `pallas operator`: {args}"
    ports = [i for i, a in enumerate(args) if a.startswith("--http-port=")]
    assert len(ports) == 1, f"expected one --http-port in {args}"
    args[ports[0]] = f"--http-port={http_port}"
    return args


@contextlib.contextmanager
def _operator_process(args: list[str], kubeconfig: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(kubeconfig)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(PALLAS), *args], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=log.parent
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def _http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as res:
            return int(res.status)
    except OSError as exc:
        return int(getattr(exc, "code", 0) or 0)


def _example_manifests(namespace: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "llm-credentials"},
        "stringData": {"OPENAI_API_KEY": "sk-chart-test"},
    }
    for doc in [secret, *docs]:
        doc["metadata"]["namespace"] = namespace
    return [secret, *docs]


def _condition(obj: dict[str, Any] | None, type_: str) -> str | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return str(cond["status"])
    return None


def _assert_crds_match_source(helm: Helm) -> None:
    """The chart's CRDs are crds/ (so adopting them changes no schema other tests rely on)."""
    rendered = helm("template", "x", str(CHART), "--kube-version", "1.34.0")
    ours = {
        d["metadata"]["name"]: d["spec"]
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "CustomResourceDefinition"
    }
    source = {
        d["metadata"]["name"]: d["spec"]
        for p in sorted(CRDS.glob("*.yaml"))
        for d in [yaml.safe_load(p.read_text())]
    }
    assert ours == source, "charts/pallas/templates/crds/ is stale: run hack/generate/chart"


def _disown_crds(cluster: LocalCluster) -> None:
    """Take the release's labels and annotations off the kept CRDs, as `kubectl apply` left them."""
    for crd in CRD_NAMES:
        got = _get(cluster, "crd", crd)
        if got is None:
            continue
        meta = got["metadata"]
        labels = [k for k in meta.get("labels") or {} if k.startswith(("app.kubernetes.io/", "helm.sh/"))]
        notes = [k for k in meta.get("annotations") or {} if k.startswith(("meta.helm.sh/", "helm.sh/"))]
        if labels:
            cluster.kubectl("label", "crd", crd, *(f"{k}-" for k in labels))
        if notes:
            cluster.kubectl("annotate", "crd", crd, *(f"{k}-" for k in notes))


REFUSED = re.compile(r"\b403\b|forbidden|permission", re.IGNORECASE)
"""A refusal in a log line; 403 as a word, not inside a timestamp's microseconds (06:41:28.927403)."""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scope", ["namespace", "cluster"])
def test_helm_install_gives_an_operator_whose_rbac_is_enough_and_uninstall_keeps_the_crds(
    kube_cluster: LocalCluster, namespace: str, tmp_path: Path, scope: str
) -> None:
    helm = Helm(kube_cluster, tmp_path / "helm")
    _assert_crds_match_source(helm)
    release = f"pallas-{secrets.token_hex(3)}"
    watched = f"{namespace[:50]}-agents"
    kube_cluster.kubectl("create", "namespace", watched)
    kube_cluster.kubectl("annotate", "namespace", watched, *(f"{k}={v}" for k, v in NO_NODE.items()))
    installed = False
    try:
        notes = helm(
            "install", release, str(CHART), "--namespace", namespace, "--take-ownership",
            "--set", "crds.enabled=true", "--set", "crds.keep=true",
            "--set", f"rbac.scope={scope}", "--set", f"watchNamespaces={{{watched}}}",
        )  # fmt: skip
        installed = True
        operator = f"{release}-operator"
        assert f"kubectl -n {namespace} rollout status deployment/{operator}" in notes
        assert f"kubectl -n {watched} apply -f examples/local-agents.yaml" in notes

        # The objects a user would look for.
        deployment = _get(kube_cluster, "deployment", operator, "-n", namespace)
        assert deployment is not None, "no operator Deployment"
        assert _get(kube_cluster, "serviceaccount", operator, "-n", namespace) is not None
        assert _get(kube_cluster, "service", f"{operator}-metrics", "-n", namespace) is not None
        assert _get(kube_cluster, "role", f"{operator}-leader-election", "-n", namespace) is not None
        assert _get(kube_cluster, "rolebinding", f"{operator}-leader-election", "-n", namespace) is not None
        if scope == "namespace":
            assert _get(kube_cluster, "role", operator, "-n", watched) is not None
            assert _get(kube_cluster, "rolebinding", operator, "-n", watched) is not None
            assert _get(kube_cluster, "clusterrole", operator) is None
            reads = _get(kube_cluster, "clusterrole", f"{operator}-namespaces")
            assert reads is not None
            # Reading namespaces, and the cluster-scoped rights behind auth.mode kubernetes.
            assert reads["rules"] == [
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
                *(r for r in CLUSTER_RULES if {"tokenreviews", "subjectaccessreviews", "clusterrolebindings"}
                  & set(r["resources"])),
            ]  # fmt: skip
        else:
            assert _get(kube_cluster, "clusterrole", operator) is not None
            assert _get(kube_cluster, "clusterrolebinding", operator) is not None
            assert _get(kube_cluster, "role", operator, "-n", watched) is None
        for crd in CRD_NAMES:
            got = _get(kube_cluster, "crd", crd)
            assert got is not None
            assert got["metadata"]["annotations"]["meta.helm.sh/release-name"] == release

        # The operator, as the chart's ServiceAccount with the chart's args.
        kubeconfig = _service_account_kubeconfig(
            kube_cluster, namespace, operator, tmp_path / "sa.kubeconfig"
        )
        log = tmp_path / "operator.log"
        with _operator_process(_local_args(deployment, 0), kubeconfig, log) as proc:
            port = logged_port(log, r"probes and metrics on http://[^:]+:(\d+)", 30, proc.poll)
            _wait_for(lambda: proc.poll() is not None or _http_status(port, "/readyz") == 200, 30,
                      "the operator leading and ready", log)  # fmt: skip
            assert proc.poll() is None, f"the operator exited ({proc.returncode}):\n{log.read_text()}"
            kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps({
                "apiVersion": "v1", "kind": "List", "items": _example_manifests(watched)}))  # fmt: skip

            def reconciled() -> bool:
                agent = _get(kube_cluster, "pallasagent", "researcher", "-n", watched)
                return _condition(agent, "Accepted") == "True"

            _wait_for(reconciled, 30, "researcher Accepted=True", log)
            children = _get(kube_cluster, "configmaps,deployments,services", "-n", watched,
                            "-l", f"{names.LABEL_AGENT}=researcher")  # fmt: skip
            assert sorted(c["kind"] for c in (children or {}).get("items", [])) == [
                "ConfigMap",
                "Deployment",
                "Service",
            ]
            # The registry's Role grants what the operator holds: no `escalate` needed.
            registry = names.registry_name("demo")
            _wait_for(
                lambda: _get(kube_cluster, "role", registry, "-n", watched), 15, "the registry Role", log
            )
            lease = _get(kube_cluster, "lease", "pallas-operator", "-n", namespace)
            assert lease is not None, "no leader-election Lease in the release namespace"
            assert _http_status(port, "/metrics") == 200
            assert proc.poll() is None
        assert proc.returncode == 0, f"the operator stopped with {proc.returncode}:\n{log.read_text()}"
        denied = [
            line
            for line in log.read_text().splitlines()
            if REFUSED.search(line) and not (scope == "namespace" and CRD_WATCH_REFUSALS.search(line))
        ]
        assert not denied, "the operator was refused something:\n" + "\n".join(denied)

        helm("uninstall", release, "--namespace", namespace, "--wait")
        installed = False
        assert _get(kube_cluster, "deployment", operator, "-n", namespace) is None
        assert _get(kube_cluster, "clusterrole", operator) is None
        assert _get(kube_cluster, "clusterrole", f"{operator}-namespaces") is None
        for crd in CRD_NAMES:
            assert _get(kube_cluster, "crd", crd) is not None, f"{crd} was deleted despite crds.keep=true"
    finally:
        if installed:
            helm("uninstall", release, "--namespace", namespace)
        kube_cluster.kubectl("delete", "namespace", watched, "--wait=false", check=False)
        _disown_crds(kube_cluster)
        install_crds(kube_cluster, *sorted(CRDS.glob("*.yaml")))
