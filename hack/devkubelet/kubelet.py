"""The dev kubelet's main loop: node, pods bound to it, Service names, and an orderly stop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import signal
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devkubelet.events import Recorder
from devkubelet.hosts import HostsFile, ServiceDNS
from devkubelet.ipam import HOST_IP, PodIPs
from devkubelet.kube import ApiError, Kube, Obj, informer, meta
from devkubelet.node import ALLOCATABLE, NodeAgent
from devkubelet.pods import NodeContext, PodWorker
from devkubelet.procs import ProcessTable, signal_group

log = logging.getLogger("dev-kubelet")

SHUTDOWN_GRACE = 10.0  # at most this long per pod when the dev kubelet itself stops
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Options:
    """The command line, checked."""

    kubeconfig: Path
    node: str
    state_dir: Path
    hosts_file: Path
    default_entrypoint: str
    pod_cidr: str
    taints: list[Obj]


class ApiObjects:
    """ConfigMaps and Secrets read straight from the API server (no cache: a dev-sized cluster)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def config_map(self, namespace: str, name: str) -> Obj | None:
        return await self.kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    async def secret(self, namespace: str, name: str) -> Obj | None:
        return await self.kube.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")


class DevKubelet:
    """Registers the node and runs every pod the scheduler binds to it as local processes."""

    def __init__(self, options: Options, kube: Kube) -> None:
        self.options = options
        self.kube = kube
        self.table = ProcessTable(options.state_dir, options.node)
        self.hosts = HostsFile(options.hosts_file, options.node)
        self.node = NodeAgent(kube, options.node, HOST_IP, options.taints)
        api_host, api_port = kube.host_port
        self.ctx = NodeContext(
            kube=kube,
            objects=ApiObjects(kube),
            ips=PodIPs(options.pod_cidr),
            table=self.table,
            recorder=Recorder(kube, options.node),
            pods_dir=options.state_dir / "pods",
            node=options.node,
            host_ip=HOST_IP,
            api_host=api_host,
            api_port=api_port,
            venv_bin=Path(sys.prefix) / "bin",
            default_entrypoint=options.default_entrypoint,
            allocatable=ALLOCATABLE,
        )
        self.workers: dict[str, PodWorker] = {}
        self._background: set[asyncio.Task[None]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Work until stop is set (or a background loop fails), then shut down cleanly."""
        self.table.lock()
        for group in self.table.reap_previous():
            log.warning("killed leftover process group %d (%s %s)", group.pgid, group.pod, group.container)
        self._clean_state()
        await self.node.register()
        log.info("node %s registered and Ready; running its pods", self.options.node)
        pod_params = {"fieldSelector": f"spec.nodeName={self.options.node}"}
        loops = [
            asyncio.create_task(self.node.heartbeat(), name="node heartbeat"),
            asyncio.create_task(
                informer(self.kube, "/api/v1/pods", pod_params, self._on_pods, self._on_pod, "pods"),
                name="pods",
            ),
            asyncio.create_task(
                ServiceDNS(self.kube, self.hosts, self.options.node).run(), name="service dns"
            ),
        ]
        stopper = asyncio.create_task(stop.wait(), name="stop")
        failure: BaseException | None = None
        try:
            done, _ = await asyncio.wait([stopper, *loops], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopper and not task.cancelled() and task.exception() is not None:
                    failure = task.exception()
                    log.error("%s failed: %r", task.get_name(), failure)
        finally:
            for task in [stopper, *loops]:
                task.cancel()
            await asyncio.gather(stopper, *loops, return_exceptions=True)
            await self.shutdown()
        if failure is not None:
            raise failure

    def _clean_state(self) -> None:
        """Secrets and start-up files of pods from an earlier run go; their logs stay."""
        if not self.ctx.pods_dir.is_dir():
            return
        for folder in self.ctx.pods_dir.iterdir():
            for transient in ("volumes", ".ns"):
                shutil.rmtree(folder / transient, ignore_errors=True)

    async def _on_pods(self, pods: list[Obj]) -> None:
        seen = set()
        for pod in pods:
            seen.add(str(meta(pod).get("uid")))
            self._observe(pod)
        for uid, worker in list(self.workers.items()):
            if uid not in seen:  # deleted while the watch was down
                worker.request_stop(worker.grace_period, delete=False, final_status=False)

    async def _on_pod(self, kind: str, pod: Obj) -> None:
        if kind == "DELETED":
            worker = self.workers.get(str(meta(pod).get("uid")))
            if worker is not None:
                worker.request_stop(worker.grace_period, delete=False, final_status=False)
            return
        self._observe(pod)

    def _observe(self, pod: Obj) -> None:
        pod_meta = meta(pod)
        uid = str(pod_meta["uid"])
        deleting = pod_meta.get("deletionTimestamp") is not None
        worker = self.workers.get(uid)
        if worker is None:
            phase = (pod.get("status") or {}).get("phase")
            if deleting and (phase in TERMINAL or not (pod.get("status") or {}).get("containerStatuses")):
                # Nothing of it runs here: finish the deletion the API server is waiting for.
                self._spawn(self._delete_unstarted(pod), f"delete {pod_meta.get('name')}")
                return
            if phase in TERMINAL:
                return
            key = f"{pod_meta['namespace']}/{pod_meta['name']}"
            predecessor = next((w for w in self.workers.values() if w.key == key), None)
            worker = PodWorker(self.ctx, pod, predecessor)
            self.workers[uid] = worker
            log.info("pod %s: starting", key)
            worker.start()
            assert worker.task is not None
            worker.task.add_done_callback(functools.partial(self._worker_done, uid))
        else:
            worker.update(pod)
        if deleting:
            grace = pod_meta.get("deletionGracePeriodSeconds")
            worker.request_stop(
                worker.grace_period if grace is None else float(grace), delete=True, final_status=True
            )

    def _worker_done(self, uid: str, task: asyncio.Task[None]) -> None:
        worker = self.workers.pop(uid, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("pod worker %s crashed: %r", worker.key if worker else uid, task.exception())
        elif worker is not None:
            log.info("pod %s: stopped", worker.key)

    async def _delete_unstarted(self, pod: Obj) -> None:
        pod_meta = meta(pod)
        body: Obj = {"gracePeriodSeconds": 0, "preconditions": {"uid": pod_meta["uid"]}}
        with contextlib.suppress(ApiError, OSError):
            await self.kube.request(
                "DELETE", f"/api/v1/namespaces/{pod_meta['namespace']}/pods/{pod_meta['name']}", body=body
            )

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)  # a reference, so the task is not garbage-collected mid-flight
        task.add_done_callback(self._background.discard)

    async def shutdown(self) -> None:
        """Stop every container, drop the hosts block, mark the node NotReady."""
        log.info("stopping: %d pod(s)", len(self.workers))
        workers = list(self.workers.values())
        for worker in workers:
            worker.request_stop(min(worker.grace_period, SHUTDOWN_GRACE), delete=False, final_status=True)
        await asyncio.gather(*(w.done.wait() for w in workers))
        self.force_kill()  # anything not accounted for by a worker (there should be nothing)
        try:
            if self.hosts.remove():
                log.info("removed the service names from %s", self.hosts.path)
        except OSError as e:
            log.error("cannot clean %s: %s", self.hosts.path, e)
        try:
            await asyncio.wait_for(self.node.sign_off(), 10)
        except (ApiError, OSError, TimeoutError) as e:
            log.warning("could not mark node %s NotReady: %s", self.options.node, e)
        await self.ctx.recorder.drain()
        log.info("stopped")

    def force_kill(self) -> None:
        """SIGKILL every container group at once (a second ^C, or leftovers at shutdown)."""
        for group in self.table.groups():
            signal_group(group.pgid, signal.SIGKILL)
