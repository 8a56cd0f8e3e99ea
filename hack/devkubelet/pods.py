"""One pod bound to this node: its sandbox (IP, volumes, state folder), containers and status.

The pod's state folder is `<state dir>/pods/<namespace>_<name>/`: `volumes/<volume>/` (removed with
the pod: it can hold Secrets and tokens), `.ns/` (transient start-up files) and `<container>.log`
(kept after the pod is gone, for reading what happened).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from devkubelet.containers import ContainerRunner, Started, port_map
from devkubelet.envvars import ConfigError, ObjectSource, PodContext, container_env, expand, mapping_for
from devkubelet.events import Recorder
from devkubelet.ipam import PodIPs, PoolExhausted
from devkubelet.kube import STRATEGIC, ApiError, Kube, Obj, meta, now
from devkubelet.probes import ProbeTarget
from devkubelet.procs import ProcessTable
from devkubelet.volumes import PodVolumes, VolumeError

log = logging.getLogger("dev-kubelet")

NSEXEC = Path(__file__).resolve().parent / "nsexec.py"
VOLUME_RETRY = 2.0
VOLUME_REFRESH = 10.0  # ConfigMap/Secret changes and token rotation reach mounted volumes this fast
STATUS_RETRY = 1.0
READ_ONLY_KINDS = ("configMap", "secret", "downwardAPI", "projected")  # always mounted read-only
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class NodeContext:
    """What every pod of this node shares."""

    kube: Kube
    objects: ObjectSource
    ips: PodIPs
    table: ProcessTable
    recorder: Recorder
    pods_dir: Path
    node: str
    host_ip: str
    api_host: str
    api_port: int
    venv_bin: Path
    default_entrypoint: str
    allocatable: Mapping[str, str]


def pod_phase(restart_policy: str, statuses: list[Obj]) -> str:
    """The pod phase from its container statuses (the kubelet's getPhase without init containers)."""
    waiting = running = stopped = succeeded = 0
    for status in statuses:
        state = status["state"]
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"]["exitCode"] == 0
        elif (status.get("lastState") or {}).get("terminated"):
            stopped += 1  # waiting to restart after having run
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


class PodWorker:
    """Runs one pod from its first sight until it is deleted or the dev kubelet stops."""

    def __init__(self, ctx: NodeContext, pod: Obj, predecessor: PodWorker | None) -> None:
        self.ctx = ctx
        self.pod = pod
        pod_meta = meta(pod)
        self.uid = str(pod_meta["uid"])
        self.namespace = str(pod_meta["namespace"])
        self.name = str(pod_meta["name"])
        self.key = f"{self.namespace}/{self.name}"
        self.dir = ctx.pods_dir / f"{self.namespace}_{self.name}"
        self.volumes = PodVolumes(ctx.kube, ctx.objects, self.dir / "volumes")
        status: Obj = pod.get("status") or {}
        self.ip: str | None = None
        self.start_time: str = str(status.get("startTime") or "")
        self.runners: list[ContainerRunner] = []
        self.waiting_message = ""
        self.initialized = True
        self._previous = {str(s["name"]): s for s in status.get("containerStatuses") or []}
        self._transitions = {
            str(c["type"]): (str(c["status"]), str(c.get("lastTransitionTime") or now()))
            for c in status.get("conditions") or []
        }
        self._predecessor = predecessor
        self._stop = asyncio.Event()
        self._stop_grace = self.grace_period
        self._delete = False
        self._final_status = False
        self._dirty = asyncio.Event()
        self._last_sent: Obj | None = None
        self.done = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    # PodHost --------------------------------------------------------------------------------

    @property
    def spec(self) -> Obj:
        spec = self.pod.get("spec") or {}
        assert isinstance(spec, dict)
        return spec

    @property
    def restart_policy(self) -> str:
        return str(self.spec.get("restartPolicy") or "Always")

    @property
    def grace_period(self) -> float:
        value = self.spec.get("terminationGracePeriodSeconds")
        return 30.0 if value is None else float(value)

    @property
    def hostname(self) -> str:
        """spec.hostname, else the pod name, cut to the 63 characters a hostname may have."""
        return str(self.spec.get("hostname") or self.name)[:63]

    def changed(self) -> None:
        self._dirty.set()

    def event(self, kind: str, reason: str, message: str, container: str | None = None) -> None:
        self.ctx.recorder.emit(self.pod, kind, reason, message, container)

    def forget(self, pid: int) -> None:
        self.ctx.table.remove(pid)

    async def launch(self, container: Obj) -> Started:
        """Start one container process: environment, mounts, then nsexec.py in a new session."""
        assert self.ip is not None
        context = self._context()
        service_env = {
            "KUBERNETES_SERVICE_HOST": self.ctx.api_host,
            "KUBERNETES_SERVICE_PORT": str(self.ctx.api_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.ctx.api_port),
            # Pallas processes bind this address (`pallas agent --host` defaults to it).
            "PALLAS_BIND_HOST": self.ip,
        }
        env = await container_env(container, context, self.ctx.objects, service_env)
        lookup = mapping_for(env)
        command = [expand(str(c), lookup) for c in container.get("command") or []]
        args = [expand(str(a), lookup) for a in container.get("args") or []]
        argv = (command or [self.ctx.default_entrypoint]) + args
        image_env = {
            "PATH": f"{self.ctx.venv_bin}:{SYSTEM_PATH}",
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "HOSTNAME": self.hostname,
        }
        full_env = {**image_env, **env}
        security: Obj = container.get("securityContext") or {}
        spec: Obj = {
            "argv": argv,
            "env": full_env,
            "cwd": container.get("workingDir") or "/",
            "hostname": self.hostname,
            "venv_bin": str(self.ctx.venv_bin),
            "parent_pid": os.getpid(),
            "staging": str(self.dir / ".ns" / f"{container['name']}.staging"),
            "mounts": self._mounts(container, env),
            "read_only_root": bool(security.get("readOnlyRootFilesystem")),
        }
        ns_dir = self.dir / ".ns"
        ns_dir.mkdir(mode=0o700, exist_ok=True)
        spec_path = ns_dir / f"{container['name']}.json"
        _write_private(spec_path, json.dumps(spec).encode())
        log_path = self.dir / f"{container['name']}.log"
        log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.write(log_fd, f"--- dev-kubelet: container {container['name']} starting at {now()}\n".encode())
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                str(NSEXEC),
                str(spec_path),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                start_new_session=True,  # its own process group: stopped and cleaned up as a whole
                cwd="/",
            )
        finally:
            os.close(log_fd)  # the child has its own copy
        self.ctx.table.add(process.pid, self.key, str(container["name"]))
        target = ProbeTarget(self.ip, port_map(container), process.pid, full_env)
        return Started(process, target)

    def _mounts(self, container: Obj, env: Mapping[str, str]) -> list[Obj]:
        volumes = {str(v["name"]): v for v in self.spec.get("volumes") or []}
        mounts: list[Obj] = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(str(mount["name"]))
            if volume is None:
                raise ConfigError(f"volumeMount {mount['name']!r}: the pod has no such volume")
            source = self.volumes.source(volume)
            sub = str(mount.get("subPath") or "")
            if mount.get("subPathExpr"):
                sub = expand(str(mount["subPathExpr"]), mapping_for(env))
            if sub:
                parts = PurePosixPath(sub).parts
                if sub.startswith("/") or ".." in parts:
                    raise ConfigError(f"invalid subPath {sub!r}")
                source = source.joinpath(*parts)
                if not source.exists():
                    if not any(k in volume for k in ("emptyDir", "hostPath")):
                        raise ConfigError(f"subPath {sub!r} does not exist in volume {mount['name']!r}")
                    source.mkdir(parents=True, mode=0o777)  # the kubelet creates missing subPaths
            read_only = bool(mount.get("readOnly")) or any(k in volume for k in READ_ONLY_KINDS)
            mounts.append({"source": str(source), "target": str(mount["mountPath"]), "read_only": read_only})
        return mounts

    def _context(self) -> PodContext:
        return PodContext(self.pod, self.ip or "", self.ctx.host_ip, self.ctx.allocatable)

    # Lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"pod {self.key}")

    def update(self, pod: Obj) -> None:
        """A newer version of the pod object (labels, deletion, readiness-gate conditions)."""
        self.pod = pod
        self.changed()

    def request_stop(self, grace: float, *, delete: bool, final_status: bool) -> None:
        """Stop the containers (SIGTERM, grace seconds, SIGKILL); then report and/or delete the pod."""
        if self._stop.is_set():
            self._stop_grace = min(self._stop_grace, grace)
            self._delete |= delete
            return
        self._stop_grace = grace
        self._delete = delete
        self._final_status = final_status
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def _run(self) -> None:
        status_task = asyncio.create_task(self._status_loop(), name=f"status {self.key}")
        refresh: asyncio.Task[None] | None = None
        try:
            if self._predecessor is not None:
                await self._predecessor.done.wait()
            if await self._prepare():
                self._start_containers()
                refresh = asyncio.create_task(self._refresh_volumes(), name=f"volumes {self.key}")
            await self._stop.wait()
        finally:
            if refresh is not None:
                refresh.cancel()
            await asyncio.gather(*(r.stop(self._stop_grace) for r in self.runners), return_exceptions=True)
            status_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await status_task
            await self._finish()

    async def _finish(self) -> None:
        try:
            if self._final_status or self._delete:
                await self._write_status()
            if self._delete:
                await self._delete_pod()
        except ApiError as e:
            if e.status not in (404, 409):  # gone already (force-deleted) is fine
                log.warning("pod %s: final update failed: %s", self.key, e)
        except Exception as e:  # the API may be gone already (cluster stopped first)
            log.warning("pod %s: final update failed: %s", self.key, e)
        finally:
            if self.ip is not None and self.ip != self.ctx.host_ip:
                self.ctx.ips.release(self.ip)
            self.volumes.remove()
            shutil.rmtree(self.dir / ".ns", ignore_errors=True)
            self.done.set()

    async def _prepare(self) -> bool:
        """The sandbox: state folder, pod IP, volumes. False if stopped before it was ready."""
        if self._stop.is_set():
            return False
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)  # volumes may hold Secrets
        uid_file = self.dir / ".uid"
        if uid_file.exists() and uid_file.read_text() != self.uid:
            # A new pod with the name of an old one (StatefulSet, bare pod): start from a clean folder.
            shutil.rmtree(self.dir)
            self.dir.mkdir(mode=0o700)
        uid_file.write_text(self.uid)
        self.volumes.remove()  # volumes from an earlier run of the dev kubelet are rebuilt fresh
        if self.spec.get("initContainers"):
            self.initialized = False
            self.waiting_message = "init containers are not supported by the pallas dev kubelet"
            self.event("Warning", "Unsupported", self.waiting_message)
            self.changed()
            return False
        if not self.start_time:
            self.start_time = now()
        while True:
            try:
                if self.ip is None:
                    preferred = (self.pod.get("status") or {}).get("podIP")
                    host_network = bool(self.spec.get("hostNetwork"))
                    self.ip = self.ctx.host_ip if host_network else self.ctx.ips.allocate(self.uid, preferred)
                    self.changed()
                await self.volumes.sync(self._context())
                self.waiting_message = ""
                return True
            except (VolumeError, PoolExhausted, OSError) as e:
                message = str(e)
                if message != self.waiting_message:
                    log.warning("pod %s: %s", self.key, message)
                    self.event("Warning", "FailedMount", message)
                    self.waiting_message = message
                    self.changed()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), VOLUME_RETRY)
            if self._stop.is_set():
                return False

    def _start_containers(self) -> None:
        for container in self.spec.get("containers") or []:
            previous = self._previous.get(str(container["name"])) or {}
            count = int(previous.get("restartCount", 0))
            state = previous.get("state") or {}
            if "running" in state or "terminated" in state:
                count += 1  # it ran under an earlier run of the dev kubelet: this start is a restart
            runner = ContainerRunner(self, container, count, str(container.get("image", "")))
            if state.get("terminated") or state.get("running"):
                runner.last_state = {"terminated": state.get("terminated") or _lost(state["running"])}
            self.runners.append(runner)
            runner.start()
        self.changed()

    async def _refresh_volumes(self) -> None:
        reported = ""
        while True:
            await asyncio.sleep(VOLUME_REFRESH)
            try:
                await self.volumes.sync(self._context())
                reported = ""
            except (VolumeError, OSError) as e:
                if str(e) != reported:
                    log.warning("pod %s: volume refresh failed: %s", self.key, e)
                    reported = str(e)

    # Status ---------------------------------------------------------------------------------

    def compute_status(self) -> Obj:
        """The status this dev kubelet reports for the pod now."""
        if self.runners:
            containers = [r.status() for r in self.runners]
        else:
            waiting: Obj = {"reason": "ContainerCreating"}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            containers = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": int((self._previous.get(str(c["name"])) or {}).get("restartCount", 0)),
                    "state": {"waiting": waiting},
                }
                for c in self.spec.get("containers") or []
            ]
        phase = pod_phase(self.restart_policy, containers)
        unready = [str(c["name"]) for c in containers if not c["ready"]]
        gates = [str(g["conditionType"]) for g in self.spec.get("readinessGates") or []]
        existing = {str(c["type"]): c for c in (self.pod.get("status") or {}).get("conditions") or []}
        gates_unmet = [g for g in gates if (existing.get(g) or {}).get("status") != "True"]
        terminal = phase in ("Succeeded", "Failed")
        conditions = [
            self._condition("PodReadyToStartContainers", self.ip is not None and not self.waiting_message),
            self._condition(
                "Initialized", self.initialized, "ContainersNotInitialized", self.waiting_message
            ),
            self._condition(
                "ContainersReady",
                not unready,
                "PodCompleted" if terminal else "ContainersNotReady",
                f"containers with unready status: [{' '.join(unready)}]",
            ),
            self._condition(
                "Ready",
                not unready and not gates_unmet,
                "PodCompleted"
                if terminal
                else ("ContainersNotReady" if unready else "ReadinessGatesNotReady"),
                f"containers with unready status: [{' '.join(unready)}]"
                if unready
                else f"readiness gates not True: {gates_unmet}",
            ),
            self._condition("PodScheduled", True),
        ]
        status: Obj = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": self.ctx.host_ip,
            "hostIPs": [{"ip": self.ctx.host_ip}],
            "containerStatuses": containers,
        }
        if self.start_time:
            status["startTime"] = self.start_time
        if self.ip is not None:
            status["podIP"] = self.ip
            status["podIPs"] = [{"ip": self.ip}]
        return status

    def _condition(self, kind: str, ok: bool, reason: str = "", message: str = "") -> Obj:
        value = "True" if ok else "False"
        previous = self._transitions.get(kind)
        stamp = previous[1] if previous and previous[0] == value else now()
        self._transitions[kind] = (value, stamp)
        # reason and message are always present, null when they do not apply: the status is a
        # strategic merge patch, which would otherwise keep a stale reason on a condition now True.
        return {
            "type": kind,
            "status": value,
            "lastProbeTime": None,
            "lastTransitionTime": stamp,
            "reason": reason if not ok and reason else None,
            "message": message if not ok and reason and message else None,
        }

    async def _write_status(self) -> None:
        status = self.compute_status()
        if status == self._last_sent:
            return
        patch = dict(status)
        for key in ("podIPs", "hostIPs"):
            if key in patch:
                # Replace, not merge by ip: after a dev kubelet restart with another --pod-cidr the
                # old address must go (the API allows one address per family).
                patch[key] = [{"$patch": "replace"}, *patch[key]]
        await self.ctx.kube.request(
            "PATCH",
            f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status",
            # The uid makes the patch conditional: it must never land on a new pod of the same name.
            body={"metadata": {"uid": self.uid}, "status": patch},
            content_type=STRATEGIC,
        )
        self._last_sent = status

    async def _status_loop(self) -> None:
        while True:
            await self._dirty.wait()
            await asyncio.sleep(0.05)  # coalesce the changes of one moment into one write
            self._dirty.clear()
            try:
                await self._write_status()
            except ApiError as e:
                if e.status in (404, 409):
                    log.info("pod %s: gone or replaced, status not written", self.key)
                    return
                log.warning("pod %s: status update failed: %s", self.key, e)
                await asyncio.sleep(STATUS_RETRY)
                self._dirty.set()
            except OSError as e:
                log.warning("pod %s: status update failed: %s", self.key, e)
                await asyncio.sleep(STATUS_RETRY)
                self._dirty.set()

    async def _delete_pod(self) -> None:
        """Remove the pod object once its containers are gone, as the kubelet does."""
        body: Obj = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": self.uid},
        }
        try:
            await self.ctx.kube.request(
                "DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{self.name}", body=body
            )
        except ApiError as e:
            if e.status not in (404, 409):
                raise


def _write_private(path: Path, content: bytes) -> None:
    """Write a file only root can read (the container spec holds resolved Secret values)."""
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        out.write(content)


def _lost(running: Obj) -> Obj:
    """The last state of a container whose process an earlier dev kubelet run took down with it."""
    return {
        "exitCode": 137,
        "reason": "Error",
        "message": "the dev kubelet was restarted",
        "startedAt": running.get("startedAt"),
        "finishedAt": now(),
    }
