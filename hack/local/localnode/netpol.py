"""NetworkPolicy enforcement on the node: sigs.k8s.io/kube-network-policies, as kind runs it.

The usual DaemonSet in kube-system (host network, privileged: it writes nftables rules and reads
an nfnetlink queue in the host's network namespace), running the binary
hack/build/cluster-addons.sh builds on `scratch`. It keeps one nftables table, `inet
kube-network-policies`: the first packet of every connection from or to a pod of this node that a
NetworkPolicy selects is queued to it in userspace, which accepts or drops it by the policies.

How it sits beside the network guard (`network`): the guard's chains hook in at priority -300
and only drop what would leave the machine; this table's chain hooks postrouting at srcnat - 5
(before kube-proxy's masquerading, so it sees pod addresses) and decides between pods.
containerd 1.6 has no NRI socket: the controller's NRI client fails to connect, says so once, and
pod addresses come from the API server. A drop
in either is final, an accept in either lets the other still look, so neither can open what the
other closes. Packets the node itself sends as root (the kubelet's probes, and on this machine
the tests and `pallas chat`) are never queued: upstream exempts root's traffic so a policy can
never cut a node off its pods.

The pod is killed with every other container by `down`, without the chance to remove its table;
`remove_table` does that after it (the table's rules would otherwise queue packets to nobody).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from localnode.settings import NodeSettings

NAMESPACE = "kube-system"
NAME = "kube-network-policies"
TABLE = "kube-network-policies"
"""The nftables table (family inet) the controller keeps."""
QUEUE_ID = 100
LABELS = {"k8s-app": NAME}


def manifests(s: NodeSettings, image: str) -> list[dict[str, Any]]:
    """ServiceAccount, RBAC (the upstream install.yaml's rules) and the DaemonSet."""
    meta = {"namespace": NAMESPACE, "labels": LABELS}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NAME, "labels": LABELS},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]},
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME, "labels": LABELS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": NAME, **meta},
            "spec": {
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        "serviceAccountName": NAME,
                        "hostNetwork": True,
                        "priorityClassName": "system-node-critical",
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {
                                "name": NAME,
                                "image": image,
                                "imagePullPolicy": "Never",
                                # The node it runs on, whichever of the cluster's nodes that is.
                                "env": [
                                    {
                                        "name": "NODE_NAME",
                                        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                    }
                                ],
                                "args": [
                                    "--hostname-override=$(NODE_NAME)",
                                    f"--nfqueue-id={QUEUE_ID}",
                                    # Its metrics on loopback, not on every interface (the default).
                                    f"--metrics-bind-address=127.0.0.1:{s.netpol_metrics_port}",
                                    # The DNS race it works around is fixed in kernels >= 6.12.
                                    "--netfilter-bug-1766-fix=false",
                                    "--v=2",
                                ],
                                "resources": {"requests": {"cpu": "50m", "memory": "50Mi"}},
                                "securityContext": {
                                    "privileged": True,
                                    "capabilities": {"add": ["NET_ADMIN"]},
                                },
                            }
                        ],
                    },
                },
            },
        },
    ]


def manifest_text(s: NodeSettings, image: str) -> str:
    """A kubectl-appliable List (JSON is YAML)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests(s, image)}, indent=1) + "\n"


def table_present(netns: str | None = None) -> bool:
    """The controller has synced its rules (it writes the table once it runs), on the first node
    or in the network namespace of another (`workers`)."""
    inside = ["ip", "netns", "exec", netns] if netns else []
    res = subprocess.run(
        [*inside, "nft", "list", "table", "inet", TABLE], capture_output=True, text=True, timeout=30
    )
    return res.returncode == 0


def remove_table() -> None:
    if table_present():
        subprocess.run(["nft", "delete", "table", "inet", TABLE], capture_output=True, timeout=30)
