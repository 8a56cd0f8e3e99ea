"""The Node object: registration, readiness, heartbeats (Lease + Ready condition) and sign-off.

The local control plane runs no node-lifecycle controller, so the dev kubelet does that part of its
job for its own node: it removes the `node.kubernetes.io/not-ready` taint the API server adds to a
new Node (otherwise nothing would ever be scheduled to it) and puts it back when it stops, so pods
created while it is down stay Pending instead of being bound to a node nobody runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
from collections.abc import Mapping
from pathlib import Path

from devkubelet.kube import MERGE, STRATEGIC, ApiError, Kube, Obj, meta, now, now_micro

log = logging.getLogger("dev-kubelet")

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION = 40  # seconds, the kubelet's default
LEASE_RENEW = 10.0  # the kubelet renews every quarter of the duration
STATUS_HEARTBEAT = 20.0
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
ALLOCATABLE: Mapping[str, str] = {"cpu": "32", "memory": "64Gi", "pods": "250", "ephemeral-storage": "100Gi"}
LABEL = "pallas.dev/dev-kubelet"


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(machine, machine)


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return "Linux"


def parse_taint(text: str) -> Obj:
    """`key[=value]:Effect` as kubelet's --register-with-taints takes it."""
    key_value, sep, effect = text.rpartition(":")
    if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not key_value:
        raise ValueError(f"taint {text!r} is not key[=value]:NoSchedule|PreferNoSchedule|NoExecute")
    key, _, value = key_value.partition("=")
    taint: Obj = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return taint


class NodeAgent:
    """Keeps this node registered and Ready while the dev kubelet runs."""

    def __init__(self, kube: Kube, name: str, host_ip: str, taints: list[Obj]) -> None:
        self.kube = kube
        self.name = name
        self.host_ip = host_ip
        self.taints = taints
        self.kubelet_version = "v0.0.0"
        self._uid = ""
        self._ready_since = now()

    @property
    def path(self) -> str:
        return f"/api/v1/nodes/{self.name}"

    async def register(self) -> None:
        """Create or adopt the Node, make it schedulable and Ready."""
        version = await self.kube.request("GET", "/version")
        self.kubelet_version = str(version.get("gitVersion", self.kubelet_version))
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _arch(),
            LABEL: "true",
        }
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {"taints": self.taints} if self.taints else {},
        }
        try:
            node = await self.kube.request("POST", "/api/v1/nodes", body=body)
        except ApiError as e:
            if e.status != 409:
                raise
            node = await self.kube.request(
                "PATCH", self.path, body={"metadata": {"labels": labels}}, content_type=MERGE
            )
        self._uid = str(meta(node).get("uid", ""))
        await self._set_taints(ready=True)
        self._ready_since = now()
        await self._post_status(ready=True)
        await self._renew_lease()

    async def _set_taints(self, *, ready: bool) -> None:
        """Our registration taints, plus not-ready while stopped; other taints are left alone."""
        node = await self.kube.request("GET", self.path)
        ours = {NOT_READY_TAINT, UNREACHABLE_TAINT} | {t["key"] for t in self.taints}
        current: list[Obj] = (node.get("spec") or {}).get("taints") or []
        taints = [t for t in current if t.get("key") not in ours] + list(self.taints)
        if not ready:
            taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
        if taints != current:
            await self.kube.request(
                "PATCH", self.path, body={"spec": {"taints": taints or None}}, content_type=MERGE
            )

    def _status(self, *, ready: bool) -> Obj:
        stamp = now()

        def condition(kind: str, status: str, reason: str, message: str) -> Obj:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": self._ready_since,
            }

        ready_condition = (
            condition("Ready", "True", "KubeletReady", "pallas dev-kubelet is posting ready status")
            if ready
            else condition("Ready", "False", "KubeletNotReady", "pallas dev-kubelet stopped")
        )
        return {
            "capacity": dict(ALLOCATABLE),
            "allocatable": dict(ALLOCATABLE),
            "addresses": [
                {"type": "InternalIP", "address": self.host_ip},
                {"type": "Hostname", "address": self.name},
            ],
            "conditions": [
                ready_condition,
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "no PID pressure"),
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": _read("/etc/machine-id"),
                "systemUUID": "",
                "bootID": _read("/proc/sys/kernel/random/boot_id"),
                "kernelVersion": os.uname().release,
                "osImage": _os_image(),
                "containerRuntimeVersion": "pallas-dev-kubelet://local-processes",
                "kubeletVersion": self.kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": _arch(),
            },
        }

    async def _post_status(self, *, ready: bool) -> None:
        await self.kube.request(
            "PATCH", f"{self.path}/status", body={"status": self._status(ready=ready)}, content_type=STRATEGIC
        )

    async def _renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{self.name}"
        if await self.kube.get(path) is None:
            body: Obj = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._uid}
                    ],
                },
                "spec": {
                    "holderIdentity": self.name,
                    "leaseDurationSeconds": LEASE_DURATION,
                    "renewTime": now_micro(),
                },
            }
            await self.kube.request(
                "POST", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", body=body
            )
            return
        await self.kube.request("PATCH", path, body={"spec": {"renewTime": now_micro()}}, content_type=MERGE)

    async def heartbeat(self) -> None:
        """Renew the Lease every 10 s and repost the Ready condition every 20 s, forever."""
        last_status = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(LEASE_RENEW)
            try:
                await self._renew_lease()
                if asyncio.get_running_loop().time() - last_status >= STATUS_HEARTBEAT:
                    await self._post_status(ready=True)
                    last_status = asyncio.get_running_loop().time()
            except ApiError as e:
                if e.status != 404:
                    log.warning("node heartbeat failed: %s", e)
                    continue
                # Someone deleted the Node (as `kubectl delete node` does): register it again.
                log.warning("node %s was deleted; registering it again", self.name)
                with contextlib.suppress(ApiError, OSError):
                    await self.register()
            except OSError as e:  # a missed heartbeat is retried on the next tick
                log.warning("node heartbeat failed: %s", e)

    async def sign_off(self) -> None:
        """Mark the node NotReady and unschedulable-by-taint as the dev kubelet stops."""
        self._ready_since = now()
        await self._post_status(ready=False)
        await self._set_taints(ready=False)
