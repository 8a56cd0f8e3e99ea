"""The monitoring add-on: a Prometheus Operator and one Prometheus, as a cluster would run them.

Built here, never pulled: the operator, its config-reloader and Prometheus v3.5.0 (the LTS
release, the operator's default) from their Go modules (hack/build/cluster-addons.sh), one
static binary each on `scratch`, in /bin as upstream's images have them. (Debian's prometheus
2.42, installed for promtool, is built without Kubernetes service discovery and refuses the
configuration the operator writes.) The CRDs
and the operator's and Prometheus's ClusterRoles are the upstream files of the same, hash-checked
module (`example/prometheus-operator-crd/`, `example/rbac/`), applied as they are.

The `Prometheus` object `pallas` in `pallas-monitoring` selects, in every namespace, the
ServiceMonitors and PrometheusRules labelled `SELECTOR` (`prometheus: pallas`): what a
PallasDeployment's `spec.monitoring.serviceMonitor.labels` and the chart's
`metrics.serviceMonitor.labels` / `prometheusRule.labels` set, as they would set `release: …` for
a kube-prometheus-stack. It scrapes and evaluates every 5 s, so a test or a demo sees a change in
seconds; there is no Alertmanager (alerts are read from Prometheus's own API).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localnode import NodeError

NAMESPACE = "pallas-monitoring"
PROMETHEUS = "pallas"
SELECTOR = {"prometheus": "pallas"}
"""The label a ServiceMonitor or PrometheusRule needs for this Prometheus to pick it up."""
OPERATOR = "prometheus-operator"
OPERATOR_VERSION = "0.85.0"
PORT = 9090
INTERVAL = "5s"
OPERATOR_LABELS = {"app.kubernetes.io/name": OPERATOR, "app.kubernetes.io/component": "controller"}
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus", "operator.prometheus.io/name": PROMETHEUS}
"""Labels the Prometheus Operator puts on the Prometheus pods (what a NetworkPolicy names)."""
RELOADER_ARGS = [
    "--listen-address=:8080",
    f"--reload-url=http://localhost:{PORT}/-/reload",
    "--config-file=/etc/prometheus/config/prometheus.yaml.gz",
    "--config-envsubst-file=/etc/prometheus/config_out/prometheus.env.yaml",
    f"--watched-dir=/etc/prometheus/rules/prometheus-{PROMETHEUS}-rulefiles-0",
    # The reloader watches its config file itself, and the kubelet replaces a Secret's files by
    # a symlink swap: after the first change the watch is gone and a new configuration waits for
    # the 3-minute re-read (prometheus-operator PR #7366, open). Measured here: a new
    # ServiceMonitor reached Prometheus after 178 s, and after 4-16 s with a 5 s re-read.
    "--watch-interval=5s",
]
"""The config-reloader's arguments as operator 0.85.0 makes them, plus `--watch-interval`. The
Prometheus's `containers` entry replaces the generated list whole (a strategic merge of a list
without a merge key), so it repeats the rest."""
UPSTREAM_ROLES = ("prometheus-operator-cluster-role.yaml", "prometheus-cluster-role.yaml")
"""The ClusterRoles of the module's example/rbac, copied by hack/build/cluster-addons.sh."""


@dataclass(frozen=True)
class Images:
    operator: str
    reloader: str
    prometheus: str


def url(domain: str = "cluster.local") -> str:
    """Prometheus by cluster DNS: the governing Service the operator makes (`prometheus-operated`)."""
    return f"http://prometheus-operated.{NAMESPACE}.svc.{domain}:{PORT}"


def prometheus_version(binary: Path) -> str:
    """`v3.5.0` from `prometheus --version` (the operator picks flags and config by version)."""
    res = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    found = re.search(r"prometheus, version (\d+\.\d+\.\d+)", res.stdout + res.stderr)
    if res.returncode != 0 or found is None:
        raise NodeError(f"{binary} --version did not name a version: {(res.stdout + res.stderr)[:200]}")
    return f"v{found.group(1)}"


def manifests(images: Images, version: str) -> list[dict[str, Any]]:
    """Namespace, ServiceAccounts, bindings to the upstream ClusterRoles, the operator and the
    Prometheus object (the CRDs and ClusterRoles are applied from the module's files)."""
    meta = {"namespace": NAMESPACE}

    def binding(name: str, role: str, account: str) -> dict[str, Any]:
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}],
        }

    locked_down = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": OPERATOR, **meta}},
        binding(f"{NAMESPACE}:{OPERATOR}", OPERATOR, OPERATOR),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus", **meta}},
        binding(f"{NAMESPACE}:prometheus", "prometheus", "prometheus"),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": OPERATOR, "labels": OPERATOR_LABELS, **meta},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": OPERATOR_LABELS},
                "template": {
                    "metadata": {"labels": OPERATOR_LABELS},
                    "spec": {
                        "serviceAccountName": OPERATOR,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 65534,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [
                            {
                                "name": OPERATOR,
                                "image": images.operator,
                                "imagePullPolicy": "Never",
                                "args": [
                                    f"--prometheus-config-reloader={images.reloader}",
                                    "--cluster-domain=cluster.local",
                                    "--log-level=info",
                                ],
                                "env": [{"name": "GOGC", "value": "30"}],
                                "ports": [{"name": "http", "containerPort": 8080}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/healthz", "port": "http"},
                                    "periodSeconds": 2,
                                },
                                "resources": {
                                    "requests": {"cpu": "50m", "memory": "64Mi"},
                                    "limits": {"memory": "256Mi"},
                                },
                                "securityContext": locked_down,
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": PROMETHEUS, **meta},
            "spec": {
                "version": version,
                "image": images.prometheus,
                "imagePullPolicy": "Never",
                "replicas": 1,
                "serviceAccountName": "prometheus",
                "scrapeInterval": INTERVAL,
                "evaluationInterval": INTERVAL,
                "retention": "2h",
                "containers": [{"name": "config-reloader", "args": RELOADER_ARGS}],
                # Every namespace, only what carries the label.
                "serviceMonitorSelector": {"matchLabels": SELECTOR},
                "serviceMonitorNamespaceSelector": {},
                "ruleSelector": {"matchLabels": SELECTOR},
                "ruleNamespaceSelector": {},
                "resources": {"requests": {"cpu": "50m", "memory": "200Mi"}},
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65534,
                    "runAsGroup": 65534,
                    "fsGroup": 65534,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            },
        },
    ]


def manifest_text(images: Images, version: str) -> str:
    """A kubectl-appliable List (JSON is YAML)."""
    items = manifests(images, version)
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1) + "\n"


def cluster_scoped(addons: Path) -> list[tuple[str, str]]:
    """(kind, name) of what `down` removes beside the namespace: bindings, roles and CRDs."""
    found = [("clusterrolebinding", f"{NAMESPACE}:{name}") for name in (OPERATOR, "prometheus")]
    found += [("clusterrole", name) for name in (OPERATOR, "prometheus")]
    for crd in sorted((addons / "crds").glob("monitoring.coreos.com_*.yaml")):
        plural = crd.name.removeprefix("monitoring.coreos.com_").removesuffix(".yaml")
        found.append(("customresourcedefinition", f"{plural}.monitoring.coreos.com"))
    return found
