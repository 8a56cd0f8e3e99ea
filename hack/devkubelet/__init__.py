"""A development stand-in for the kubelet: runs the pods scheduled to its node as local processes.

THIS IS DEVELOPMENT TOOLING, NOT A KUBELET. `hack/dev-kubelet` lets the local control plane from
`hack/cluster` (which has no kubelet, no container runtime and no kube-proxy) run Pallas's agent and
registry pods for `make demo` and the e2e tests. It registers a Node, and for every pod bound to it
starts each container's `command`/`args` with the container's environment (Secrets, ConfigMaps,
downward API, `$(VAR)` expansion) as a process of this machine, with the pod's volumes bind-mounted
at their mountPaths in a private mount namespace per container and the pod's own loopback IP
(127.1.x.y) in `PALLAS_BIND_HOST`. It runs readiness, liveness and startup probes, restarts
containers, reports pod status, honours deletion with its grace period, and maps Service DNS names
to ready pod IPs (computed from Service selectors and pod readiness: the API server keeps loopback
addresses out of EndpointSlices) in a marked block of /etc/hosts.

It does not pull or unpack images (the command runs from this machine, the `pallas` entrypoint from
the project's virtualenv), and it has no cgroups (no resource limits), no network isolation (pods
share the host's network stack), no user switching (runAsUser is ignored: everything runs as root),
no kube-proxy (a Service's port must equal its targetPort) and no kubelet API (`kubectl logs`,
`exec` and `port-forward` do not work: logs are files under the state folder). It needs root for
the mount namespaces and the hosts file. See docs/dev-kubelet.md.
"""
