"""Cluster DNS: CoreDNS as the usual kube-dns Deployment and Service, and the host's way to it.

CoreDNS answers `cluster.local` and the reverse zones of the pod and Service ranges, and nothing
else: there is no `forward` plugin, so it never sends a query anywhere, and a name outside its
zones gets REFUSED. That answer also makes the host's resolver (glibc and Go alike) move on to
its next nameserver, which is what lets `host_resolver_on()` put the cluster DNS first in
/etc/resolv.conf: cluster names resolve on the host (the demo's `pallas chat`, the e2e tests),
every other name as before. `down` takes the block out again.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

from localnode.configs import CLUSTER_DOMAIN
from localnode.settings import NodeSettings

RESOLV_CONF = Path("/etc/resolv.conf")
BEGIN = "# BEGIN pallas-cluster"
END = "# END pallas-cluster"
DNS_PORT = 1053  # CoreDNS listens here as a non-root user; the Service maps 53 to it
LABELS = {"k8s-app": "kube-dns"}


def reverse_zone(cidr: str) -> str:
    """The in-addr.arpa zone covering `cidr`, widened to whole octets (10.96.0.0/16 → 96.10…)."""
    net = ipaddress.ip_network(cidr)
    octets = max(1, net.prefixlen // 8)
    return ".".join(reversed(str(net.network_address).split(".")[:octets])) + ".in-addr.arpa"


def corefile(s: NodeSettings) -> str:
    zones = [CLUSTER_DOMAIN, reverse_zone(s.pod_cidr), reverse_zone(s.service_cidr)]
    header = " ".join(f"{zone}:{DNS_PORT}" for zone in dict.fromkeys(zones))
    return f"""{header} {{
    errors
    health {{
        lameduck 5s
    }}
    ready
    kubernetes {" ".join(dict.fromkeys(zones))} {{
        pods insecure
        ttl 30
    }}
    prometheus :9153
    cache 30
    reload
}}
"""


def manifests(s: NodeSettings, image: str) -> list[dict[str, Any]]:
    """ServiceAccount, RBAC, Corefile, Deployment and Service of kube-dns in kube-system."""
    ns = "kube-system"
    meta = {"namespace": ns, "labels": LABELS}
    port = {"containerPort": DNS_PORT}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns", "labels": LABELS},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns", "labels": LABELS},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", **meta},
            "data": {"Corefile": corefile(s)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "coredns", **meta},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "priorityClassName": "system-cluster-critical",
                        "dnsPolicy": "Default",
                        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 65532,
                            "runAsGroup": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [
                            {
                                "name": "coredns",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "protocol": "UDP", **port},
                                    {"name": "dns-tcp", "protocol": "TCP", **port},
                                    {"name": "metrics", "protocol": "TCP", "containerPort": 9153},
                                ],
                                "resources": {
                                    "requests": {"cpu": "50m", "memory": "64Mi"},
                                    "limits": {"memory": "170Mi"},
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                                "volumeMounts": [
                                    {"name": "config", "mountPath": "/etc/coredns", "readOnly": True}
                                ],
                                "livenessProbe": {
                                    "httpGet": {"path": "/health", "port": 8080},
                                    "initialDelaySeconds": 10,
                                    "periodSeconds": 10,
                                    "failureThreshold": 5,
                                },
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8181},
                                    "periodSeconds": 2,
                                },
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", **meta, "labels": {**LABELS, "kubernetes.io/name": "CoreDNS"}},
            "spec": {
                "selector": LABELS,
                "clusterIP": s.dns_ip,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": DNS_PORT},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": DNS_PORT},
                    {"name": "metrics", "port": 9153, "protocol": "TCP"},
                ],
            },
        },
    ]


def manifest_text(s: NodeSettings, image: str) -> str:
    """A kubectl-appliable List (JSON is YAML)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests(s, image)}, indent=1) + "\n"


# --- the host's resolver ------------------------------------------------------------------------


def _without_block(text: str) -> str:
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith(BEGIN):
            inside = True
        elif line.startswith(END) and inside:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out) + ("\n" if out else "")


def _write_in_place(text: str) -> None:
    # In place, not by rename: /etc/resolv.conf is often a bind mount or a symlink target.
    with RESOLV_CONF.open("r+") as f:
        f.seek(0)
        f.write(text)
        f.truncate()


def host_resolver_on(s: NodeSettings, state_dir: Path) -> None:
    """Put the cluster DNS first among the host's nameservers (a marked block)."""
    current = RESOLV_CONF.read_text()
    block = (
        f"{BEGIN} {state_dir} (hack/local/cluster: cluster.local through the local cluster DNS; "
        "other names are refused there and go to the next nameserver; `hack/local/cluster down` removes it)\n"
        f"nameserver {s.dns_ip}\n{END}\n"
    )
    _write_in_place(block + _without_block(current))


def host_resolver_off() -> None:
    if RESOLV_CONF.exists() and BEGIN in RESOLV_CONF.read_text():
        _write_in_place(_without_block(RESOLV_CONF.read_text()))


def host_resolver_is_on() -> bool:
    return RESOLV_CONF.exists() and BEGIN in RESOLV_CONF.read_text()
