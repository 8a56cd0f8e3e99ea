"""Service DNS names → pod IPs, as one marked block of the hosts file.

There is no cluster DNS and no kube-proxy here, so `<svc>.<ns>.svc.cluster.local`, `<svc>.<ns>.svc`
and `<svc>.<ns>` resolve (through /etc/hosts) straight to the IP of one ready pod behind the Service.
Clients then connect to that pod IP on the Service's port, so a Service only works when its port
equals its targetPort; a ClusterIP is only ever allocated, never used.

EndpointSlices cannot say which pods those are: pod IPs are loopback addresses (ipam.py), which the
API server refuses in EndpointSlices and Endpoints, so the controller-manager leaves them empty. The
backends are computed here instead, the way the EndpointSlice controller would: the pods in the
Service's namespace whose labels match its `spec.selector`, with `status.podIP` set, condition
Ready True (any running pod with `publishNotReadyAddresses`) and not being deleted, that run on this
node or on another live node of this stand-in (label `pallas.dev/dev-kubelet`, Ready, heartbeat
younger than a minute). Only loopback pod IPs are ever written. Services, running Pods and those
Nodes are list-watched; the dev kubelet's own pod status writes come back through the Pod watch, so
the block follows a readiness or Service change within about a second. Selector-less and
ExternalName Services have no backends that can be derived and are not mapped; headless Services
with a selector are mapped like any other. The chosen pod stays chosen while it is ready.

The block is delimited by `# BEGIN pallas-dev-kubelet <node>` and `# END pallas-dev-kubelet <node>`;
lines outside it are never changed. The file is rewritten atomically (a temporary file renamed over
it) unless it is a mount point that cannot be replaced, where it is rewritten in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import ipaddress
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from devkubelet.ipam import LOOPBACK
from devkubelet.kube import Kube, Obj, informer, meta
from devkubelet.node import LABEL as DEV_NODE_LABEL

log = logging.getLogger("dev-kubelet")

DEBOUNCE = 0.2  # seconds: coalesce the burst of pod and Service updates a rollout produces
RESYNC = 10.0  # recompute at least this often (a node whose heartbeat went stale drops out)
NODE_STALE = 60.0  # seconds without a Ready heartbeat after which another dev node's pods stop counting


class HostsFile:
    """This node's block in a hosts file."""

    def __init__(self, path: Path, node: str) -> None:
        self.path = path
        self.begin = f"# BEGIN pallas-dev-kubelet {node}"
        self.end = f"# END pallas-dev-kubelet {node}"

    def render(self, mapping: dict[str, str]) -> list[str]:
        """The block's lines for service key (`<svc>.<ns>`) → IP; none when there is nothing to map."""
        if not mapping:
            return []
        lines = [
            self.begin,
            "# Service names of the pallas development stand-in for the kubelet (hack/dev-kubelet).",
        ]
        for key in sorted(mapping):
            lines.append(f"{mapping[key]}\t{key}.svc.cluster.local {key}.svc {key}")
        lines.append(self.end)
        return lines

    def _without_block(self, text: str) -> list[str]:
        kept: list[str] = []
        inside = False
        for line in text.splitlines():
            if line.strip() == self.begin:
                inside = True
            elif inside and line.strip() == self.end:
                inside = False
            elif not inside:
                kept.append(line)
        return kept

    def write(self, mapping: dict[str, str]) -> bool:
        """Make the block hold mapping (no block when empty); whether the file changed."""
        with self._locked():
            try:
                current = self.path.read_text()
            except FileNotFoundError:
                current = ""
            lines = self._without_block(current) + self.render(mapping)
            wanted = "\n".join(lines) + "\n" if lines else ""
            if wanted == current:
                return False
            self._replace(wanted)
            return True

    def remove(self) -> bool:
        return self.write({})

    def mapped(self) -> dict[str, str]:
        """The names this node's block maps (name → IP), read back from the file."""
        out: dict[str, str] = {}
        inside = False
        for line in self.path.read_text().splitlines():
            if line.strip() == self.begin:
                inside = True
            elif line.strip() == self.end:
                inside = False
            elif inside and line.strip() and not line.lstrip().startswith("#"):
                ip, *names = line.split()
                out.update(dict.fromkeys(names, ip))
        return out

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise with other dev kubelets editing the same file (a lock on its folder: the file
        itself is replaced, so a lock on it would not outlive a rewrite)."""
        fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _replace(self, text: str) -> None:
        tmp = self.path.with_name(f".{self.path.name}.pallas-dev-kubelet.tmp")
        try:
            info = self.path.stat()
            mode, owner = info.st_mode & 0o7777, (info.st_uid, info.st_gid)
        except FileNotFoundError:
            mode, owner = 0o644, None
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
            os.fchmod(out.fileno(), mode)
            if owner is not None:
                os.fchown(out.fileno(), *owner)
        try:
            os.replace(tmp, self.path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            if e.errno not in (errno.EBUSY, errno.EXDEV, errno.EPERM):
                raise
            # A bind-mounted hosts file (as in containers) cannot be renamed over: rewrite in place.
            with open(self.path, "w") as out:
                out.write(text)


class Store:
    """The objects one informer keeps (by uid), and whether it has listed them once."""

    def __init__(self, changed: Callable[[], None]) -> None:
        self.items: dict[str, Obj] = {}
        self.synced = False
        self._changed = changed

    async def on_sync(self, items: list[Obj]) -> None:
        self.items = {str(meta(o).get("uid")): o for o in items}
        self.synced = True
        self._changed()

    async def on_event(self, kind: str, obj: Obj) -> None:
        uid = str(meta(obj).get("uid"))
        if kind == "DELETED":
            self.items.pop(uid, None)
        else:
            self.items[uid] = obj
        self._changed()


class ServiceDNS:
    """Watches Services, running Pods and dev nodes; keeps the hosts block in step with ready pods."""

    def __init__(self, kube: Kube, hosts: HostsFile, node: str) -> None:
        self.kube = kube
        self.hosts = hosts
        self.node = node
        self._dirty = asyncio.Event()
        self.services = Store(self._dirty.set)
        self.pods = Store(self._dirty.set)
        self.nodes = Store(self._dirty.set)
        self._mapping: dict[str, str] = {}

    async def run(self) -> None:
        watches = [
            ("services", "/api/v1/services", None, self.services),
            # Only running pods can be ready: the phase selector keeps pending ones out of memory.
            ("pods", "/api/v1/pods", {"fieldSelector": "status.phase=Running"}, self.pods),
            ("nodes", "/api/v1/nodes", {"labelSelector": f"{DEV_NODE_LABEL}=true"}, self.nodes),
        ]
        tasks = [
            asyncio.create_task(
                informer(self.kube, path, params, store.on_sync, store.on_event, what), name=f"dns {what}"
            )
            for what, path, params, store in watches
        ]
        tasks.append(asyncio.create_task(self._writer(), name="hosts writer"))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def live_nodes(self, at: datetime | None = None) -> set[str]:
        """This node, and the other dev nodes whose Ready heartbeat is recent."""
        at = at or datetime.now(UTC)
        names = {self.node}
        for node in self.nodes.items.values():
            ready = next(
                (c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"),
                None,
            )
            if ready is None or ready.get("status") != "True":
                continue
            beat = _parse_time(ready.get("lastHeartbeatTime"))
            if beat is not None and (at - beat).total_seconds() < NODE_STALE:
                names.add(str(meta(node).get("name")))
        return names

    def compute(self) -> dict[str, str]:
        """`<svc>.<ns>` → one ready backend IP; the current choice is kept while it stays ready."""
        ready = service_backends(self.services.items.values(), self.pods.items.values(), self.live_nodes())
        mapping: dict[str, str] = {}
        for key, ips in ready.items():
            current = self._mapping.get(key)
            mapping[key] = current if current in ips else min(ips, key=_ip_sort_key)
        return mapping

    @property
    def synced(self) -> bool:
        return self.services.synced and self.pods.synced and self.nodes.synced

    async def _writer(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), RESYNC)
            await asyncio.sleep(DEBOUNCE)
            self._dirty.clear()
            if not self.synced:
                continue  # a partial view would drop names that are fine
            mapping = self.compute()
            try:
                if self.hosts.write(mapping):
                    log.info("hosts file: %d service name(s) mapped", len(mapping))
                self._mapping = mapping
            except OSError as e:
                log.error("cannot update %s: %s", self.hosts.path, e)
                await asyncio.sleep(1)
                self._dirty.set()


def service_backends(services: Iterable[Obj], pods: Iterable[Obj], nodes: set[str]) -> dict[str, set[str]]:
    """`<svc>.<ns>` → the IPs of its ready pods on the given nodes (Services without any are left out).

    As the EndpointSlice controller selects them: pods of the Service's namespace whose labels match
    `spec.selector`, running, not being deleted, with an IP and condition Ready True (any such pod
    when the Service sets `publishNotReadyAddresses`). Only loopback IPs count (the only addresses
    dev kubelet pods have, and the only ones this machine may send to). Selector-less and
    ExternalName Services have no derivable backends.
    """
    by_namespace: dict[str, list[Obj]] = {}
    for pod in pods:
        by_namespace.setdefault(str(meta(pod).get("namespace")), []).append(pod)
    found: dict[str, set[str]] = {}
    for service in services:
        spec: Obj = service.get("spec") or {}
        selector: dict[str, str] = spec.get("selector") or {}
        if not selector or spec.get("type") == "ExternalName":
            continue
        service_meta = meta(service)
        namespace = str(service_meta.get("namespace"))
        any_state = bool(spec.get("publishNotReadyAddresses"))
        ips: set[str] = set()
        for pod in by_namespace.get(namespace, []):
            labels: dict[str, str] = meta(pod).get("labels") or {}
            if all(labels.get(k) == v for k, v in selector.items()):
                ip = _serving_ip(pod, nodes, any_state)
                if ip is not None:
                    ips.add(ip)
        if ips:
            found[f"{service_meta.get('name')}.{namespace}"] = ips
    return found


def _serving_ip(pod: Obj, nodes: set[str], any_state: bool) -> str | None:
    """The pod's IP if it may serve traffic for a Service, else None."""
    if meta(pod).get("deletionTimestamp"):
        return None
    spec: Obj = pod.get("spec") or {}
    status: Obj = pod.get("status") or {}
    if spec.get("nodeName") not in nodes or status.get("phase") != "Running":
        return None
    ip = status.get("podIP")
    if not ip or not _is_loopback(str(ip)):
        return None
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return str(ip) if ready or any_state else None


def _is_loopback(ip: str) -> bool:
    try:
        return ipaddress.IPv4Address(ip) in LOOPBACK
    except ValueError:
        return False


def _parse_time(value: object) -> datetime | None:
    """A metav1.Time (`2024-05-01T12:00:00Z`), or None."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _ip_sort_key(ip: str) -> tuple[int, ...]:
    return tuple(int(p) for p in ip.split(".")) if ip.count(".") == 3 else (999,)
