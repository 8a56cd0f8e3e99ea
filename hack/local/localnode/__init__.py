"""The local Kubernetes node that hack/local/cluster starts beside the control plane.

A real kubelet and kube-proxy (from hack/build/k8s-bins.sh), containerd and runc with the bridge
CNI plugin (Debian packages), CoreDNS as the kube-dns Deployment, and a network guard that keeps
every pod and Service packet inside this machine (docs/local-kubernetes.md, "The node").

Modules: `settings` (what the environment asks for, validated), `network` (guard, bridge, routes,
sysctls), `configs` (containerd, CNI, kubelet and kube-proxy configuration files), `runtime`
(containerd: images in, containers out, mounts), `images` (buildah: the Debian base, the pause,
CoreDNS and Pallas images), `dns` (the kube-dns objects and the host's resolver). Standard library
only, like hack/local/cluster, so it runs before the project's virtualenv exists.
"""


class NodeError(Exception):
    """A problem the user can act on; hack/local/cluster prints it as one line."""
