"""The node's configuration files: containerd, its registry hosts, CNI, kubelet and kube-proxy.

Everything a component keeps lives under the cluster's state folder (`NodePaths`), so `down`
removes it all; nothing is written to /etc, /var/lib or /opt (the one path the kubelet insists
on is /var/log/containers, whose links `runtime.remove_container_log_links` removes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from localnode.settings import NodeSettings

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins (not /opt/cni/bin)
CLUSTER_DOMAIN = "cluster.local"
REFUSED_REGISTRY = "http://127.0.0.1:1"
"""Where containerd is told every registry lives: a closed loopback port. Images are imported,
never pulled, and a pull (an image a pod names that nobody imported) must fail on this machine
instead of reaching a registry out there."""


@dataclass(frozen=True)
class NodePaths:
    """Where the node's files are, under the cluster's state folder."""

    root: Path

    @property
    def containerd_dir(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_config(self) -> Path:
        return self.containerd_dir / "config.toml"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def registry_hosts(self) -> Path:
        return self.containerd_dir / "certs.d"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet-config.json"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def proxy_config(self) -> Path:
        return self.root / "kube-proxy-config.json"

    def kubeconfig(self, user: str) -> Path:
        return self.root / f"{user}.kubeconfig"


def containerd_config(paths: NodePaths, sandbox_image: str) -> str:
    """containerd 1.6 (CRI v1) with runc, the bridge CNI config below, and no reachable registry."""
    d = paths.containerd_dir
    return f"""version = 2
root = "{d / "root"}"
state = "{d / "state"}"
# Plugins that would write outside the state folder or are of no use here.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{paths.containerd_socket}"

[ttrpc]
  address = "{paths.containerd_socket}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # No CAP_SYS_RESOURCE on these machines: the sandbox's oom_score_adj -998 would be refused
  # (runc only says "can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  # Network namespaces under the state folder, so `down` finds and unmounts every one.
  netns_mounts_under_state_dir = true
  # exec/attach/port-forward streams: loopback only, a free port.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  # crun refuses the hybrid cgroup hierarchy of these machines; runc copes.
  BinaryName = "runc"
  Root = "{paths.root / "runc"}"
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{paths.cni_conf_dir}"
  max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "{paths.registry_hosts}"
"""


def registry_hosts() -> str:
    """`_default/hosts.toml`: every registry (docker.io, ghcr.io, localhost, …) is a closed port."""
    return f'server = "{REFUSED_REGISTRY}"\ncapabilities = ["pull", "resolve"]\n'


def containerd_env() -> dict[str, str]:
    """Proxy settings that send any registry request containerd might still make to the closed
    port as well (Go never proxies loopback, so imports and the CRI socket are unaffected)."""
    proxy = REFUSED_REGISTRY
    return {
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "NO_PROXY": "",
    }


def cni_config(s: NodeSettings, paths: NodePaths) -> str:
    """The bridge plugin on the node's bridge; pods get their subnet, the cluster's pod range (the
    other nodes' pods, through this node) and the Service range, no default route (`network`)."""
    conf = {
        "cniVersion": "1.0.0",
        "name": "pallas",
        "plugins": [
            {
                "type": "bridge",
                "bridge": s.bridge,
                # The bridge's address is set by `network` (a gateway here would switch on
                # machine-wide forwarding), and nothing is masqueraded.
                "isGateway": False,
                "isDefaultGateway": False,
                "ipMasq": False,
                # A pod may reach itself through its own Service.
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": s.pod_cidr, "gateway": s.node_ip}]],
                    "routes": [
                        {"dst": s.cluster_cidr, "gw": s.node_ip},
                        {"dst": s.service_cidr, "gw": s.node_ip},
                    ],
                    "dataDir": str(paths.cni_ipam_dir),
                },
            }
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def kubelet_config(
    s: NodeSettings, paths: NodePaths, pki: Path, cert: str = "kubelet", cgroup_root: str = ""
) -> str:
    """KubeletConfiguration (JSON is YAML): cgroupfs on the hybrid hierarchy, TLS from the local
    CA (`cert`.crt/.key), webhook authn/authz (the API server's exec/logs/port-forward calls),
    cluster DNS. A second node on the machine puts its pods under a `cgroup_root` of its own:
    two kubelets must not share the `kubepods` hierarchy."""
    conf: dict[str, object] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": s.node_ip,
        "port": s.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": s.kubelet_healthz_port,
        "tlsCertFile": str(pki / f"{cert}.crt"),
        "tlsPrivateKeyFile": str(pki / f"{cert}.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [s.dns_ip],
        # No host resolver inside pods: ClusterFirst pods get the cluster DNS only, and `Default`
        # ones (CoreDNS) none at all.
        "resolvConf": "",
        "podLogsDir": str(paths.pod_logs),
        "staticPodPath": "",
        "registerNode": True,
        "maxPods": 110,
        # Tiny thresholds: a busy development disk must not evict the demo's pods.
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        # Pods are synced (and Secret and ConfigMap volumes refreshed) every 10 s rather than
        # every minute: a Prometheus Operator's new configuration reaches its Prometheus in
        # seconds on a node with a handful of pods.
        "syncFrequency": "10s",
    }
    if cgroup_root:
        conf["cgroupRoot"] = cgroup_root
    return json.dumps(conf, indent=2) + "\n"


def proxy_config(s: NodeSettings, paths: NodePaths) -> str:
    """KubeProxyConfiguration: iptables mode; NodePorts only on the node's bridge address;
    conntrack sysctls left as they are; health and metrics on loopback."""
    conf = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(paths.kubeconfig("kube-proxy"))},
        "hostnameOverride": s.name,
        "mode": "iptables",
        "clusterCIDR": s.pod_cidr,
        "bindAddress": s.node_ip,
        "healthzBindAddress": f"127.0.0.1:{s.proxy_healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{s.proxy_metrics_port}",
        "nodePortAddresses": [f"{s.node_ip}/32"],
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"masqueradeAll": False, "syncPeriod": "30s", "minSyncPeriod": "1s"},
    }
    return json.dumps(conf, indent=2) + "\n"


def write_all(
    s: NodeSettings,
    paths: NodePaths,
    pki: Path,
    sandbox_image: str,
    cert: str = "kubelet",
    cgroup_root: str = "",
) -> None:
    """Write every file above (directories included)."""
    for folder in (
        paths.containerd_dir,
        paths.registry_hosts / "_default",
        paths.cni_conf_dir,
        paths.kubelet_dir,
    ):
        folder.mkdir(parents=True, exist_ok=True)
    paths.containerd_config.write_text(containerd_config(paths, sandbox_image))
    (paths.registry_hosts / "_default" / "hosts.toml").write_text(registry_hosts())
    (paths.cni_conf_dir / "10-pallas.conflist").write_text(cni_config(s, paths))
    paths.kubelet_config.write_text(kubelet_config(s, paths, pki, cert, cgroup_root))
    paths.proxy_config.write_text(proxy_config(s, paths))
