"""One container of a pod: its process, restarts with back-off, and its probes.

The runner keeps the container's state the way the kubelet reports it (waiting / running /
terminated, lastState, restartCount, started, ready) and tells its pod whenever that changes.
Restart back-off is shortened for development: the first restart is immediate, later ones wait
2 s, 4 s, … up to 60 s, and the back-off resets once a container has run for 60 s (the kubelet
uses 10 s … 300 s and resets after 10 minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Protocol

from devkubelet.envvars import ConfigError
from devkubelet.kube import ApiError, Obj, now
from devkubelet.probes import ProbeTarget, run_probe
from devkubelet.procs import signal_group

log = logging.getLogger("dev-kubelet")

BACKOFF_FIRST = 2.0
BACKOFF_MAX = 60.0
BACKOFF_RESET_AFTER = 60.0
CONFIG_RETRY = 2.0  # a missing Secret or ConfigMap is looked up again this often
UNREADY_PROBE_PERIOD = 1.0  # readiness is probed at least this often until the first success


@dataclass(frozen=True)
class Started:
    """A container process the pod launched."""

    process: asyncio.subprocess.Process
    target: ProbeTarget


class PodHost(Protocol):
    """What a container runner needs from its pod."""

    @property
    def restart_policy(self) -> str: ...

    @property
    def grace_period(self) -> float: ...

    async def launch(self, container: Obj) -> Started: ...

    def forget(self, pid: int) -> None: ...

    def changed(self) -> None: ...

    def event(self, kind: str, reason: str, message: str, container: str | None = None) -> None: ...


class Backoff:
    """Restart delays: 0, 2, 4, … 60 s; back to 0 after a long enough run."""

    def __init__(self) -> None:
        self._next = 0.0

    def delay(self, ran_for: float) -> float:
        if ran_for >= BACKOFF_RESET_AFTER:
            self._next = 0.0
        current = self._next
        self._next = BACKOFF_FIRST if current == 0 else min(current * 2, BACKOFF_MAX)
        return current


async def stop_group(process: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the container's process group, SIGKILL it after the grace period."""
    if process.returncode is None:
        signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), grace)
    signal_group(process.pid, signal.SIGKILL)
    await process.wait()


class ContainerRunner:
    """Runs, restarts and probes one container until stopped."""

    def __init__(self, host: PodHost, spec: Obj, restart_count: int, image: str) -> None:
        self.host = host
        self.spec = spec
        self.name = str(spec["name"])
        self.image = image
        self.restart_count = restart_count
        self.state: Obj = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: Obj = {}
        self.ready = False
        self.started = False
        self.container_id = ""
        self._process: asyncio.subprocess.Process | None = None
        self._stopping = False
        self._wake = asyncio.Event()
        self._backoff = Backoff()
        self._ran_for = 0.0
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"container {self.name}")
        self.task.add_done_callback(self._report_crash)

    def _report_crash(self, task: asyncio.Task[None]) -> None:
        """A bug in the runner must show in the log, not vanish with the task."""
        if not task.cancelled() and task.exception() is not None:
            log.error("container %s: runner failed: %r", self.name, task.exception())

    def status(self) -> Obj:
        """This container's entry of status.containerStatuses."""
        out: Obj = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def stop(self, grace: float) -> None:
        """Stop the container for good (pod deletion or dev kubelet shutdown)."""
        self._stopping = True
        self._wake.set()
        if self._process is not None:
            await stop_group(self._process, grace)
        if self.task is not None:
            await self.task

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake up at once when the runner is stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    def _set(self, state: Obj) -> None:
        self.state = state
        self.host.changed()

    async def _run(self) -> None:
        while not self._stopping:
            try:
                started = await self.host.launch(self.spec)
            except (ConfigError, ApiError, OSError) as e:
                # A missing Secret/ConfigMap, an unreachable API server or a failed spawn: retry.
                if self.state.get("waiting", {}).get("message") != str(e):
                    self.host.event("Warning", "Failed", f"Error: {e}", self.name)
                self._set({"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}})
                await self._sleep(CONFIG_RETRY)
                continue
            if self.stopping:  # stopped while launching: never let the new process run on
                await stop_group(started.process, 0)
                self.host.forget(started.process.pid)
                break
            await self._supervise(started)
            if self.stopping or not self._restart_wanted():
                break
            await self._before_restart()

    async def _supervise(self, started: Started) -> None:
        process = started.process
        self._process = process
        self.container_id = f"devkubelet://{process.pid}"
        began_at, began = now(), time.monotonic()
        self.ready = False
        self.started = "startupProbe" not in self.spec
        self._set({"running": {"startedAt": began_at}})
        self.host.event("Normal", "Started", f"Started container {self.name} (pid {process.pid})", self.name)
        probes = asyncio.create_task(self._probe(started), name=f"probes {self.name}")
        code = await process.wait()
        probes.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probes
        # As when a container's init process exits: whatever it left running in its group goes too.
        signal_group(process.pid, signal.SIGKILL)
        self.host.forget(process.pid)
        self._process = None
        self.ready = False
        self.started = False
        terminated: Obj = {
            "exitCode": code if code >= 0 else 128 - code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": began_at,
            "finishedAt": now(),
            "containerID": self.container_id,
        }
        if code < 0:
            terminated["signal"] = -code
        self._ran_for = time.monotonic() - began
        self._set({"terminated": terminated})
        if not self.stopping:
            log.info("container %s exited with %s", self.name, terminated["exitCode"])

    def _restart_wanted(self) -> bool:
        policy = self.host.restart_policy
        code = int(self.state["terminated"]["exitCode"])
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    async def _before_restart(self) -> None:
        self.last_state = {"terminated": self.state["terminated"]}
        delay = self._backoff.delay(self._ran_for)
        if delay > 0:
            message = f"back-off {delay:g}s restarting failed container={self.name}"
            self.host.event("Warning", "BackOff", message, self.name)
            self._set({"waiting": {"reason": "CrashLoopBackOff", "message": message}})
            await self._sleep(delay)
        if not self.stopping:
            self.restart_count += 1

    # Probes ---------------------------------------------------------------------------------

    async def _probe(self, started: Started) -> None:
        t0 = time.monotonic()
        startup = self.spec.get("startupProbe")
        if startup is not None:
            if not await self._until(startup, started.target, t0, "Startup"):
                await self._kill(started.process, "failed startup probe")
                return
            self.started = True
            self.host.changed()
        loops: list[Awaitable[None]] = []
        readiness = self.spec.get("readinessProbe")
        if readiness is None:
            self.ready = True
            self.host.changed()
        else:
            loops.append(self._readiness(readiness, started.target, t0))
        liveness = self.spec.get("livenessProbe")
        if liveness is not None:
            loops.append(self._liveness(liveness, started, t0))
        await asyncio.gather(*loops)

    async def _until(self, probe: Obj, target: ProbeTarget, t0: float, what: str) -> bool:
        """Probe until success (True) or failureThreshold consecutive failures (False)."""
        await _initial_delay(probe, t0)
        failures = 0
        while True:
            ok, message = await run_probe(probe, target)
            if ok:
                return True
            failures += 1
            if failures >= int(probe.get("failureThreshold", 3)):
                self.host.event("Warning", "Unhealthy", f"{what} probe failed: {message}", self.name)
                return False
            await asyncio.sleep(float(probe.get("periodSeconds", 10)))

    async def _readiness(self, probe: Obj, target: ProbeTarget, t0: float) -> None:
        await _initial_delay(probe, t0)
        successes = failures = 0
        ever_ready = False
        while True:
            ok, message = await run_probe(probe, target)
            if ok:
                successes, failures = successes + 1, 0
                if not self.ready and successes >= int(probe.get("successThreshold", 1)):
                    self.ready = ever_ready = True
                    self.host.changed()
            else:
                successes, failures = 0, failures + 1
                if failures == int(probe.get("failureThreshold", 3)):
                    self.host.event("Warning", "Unhealthy", f"Readiness probe failed: {message}", self.name)
                    if self.ready:
                        self.ready = False
                        self.host.changed()
            period = float(probe.get("periodSeconds", 10))
            # Development speed-up: until the first success, do not wait a whole period to notice
            # that the server came up (its readiness is unknown, so no threshold is bypassed).
            await asyncio.sleep(period if ever_ready else min(period, UNREADY_PROBE_PERIOD))

    async def _liveness(self, probe: Obj, started: Started, t0: float) -> None:
        await _initial_delay(probe, t0)
        failures = 0
        while True:
            ok, message = await run_probe(probe, started.target)
            failures = 0 if ok else failures + 1
            if failures >= int(probe.get("failureThreshold", 3)):
                self.host.event("Warning", "Unhealthy", f"Liveness probe failed: {message}", self.name)
                await self._kill(started.process, "failed liveness probe")
                return
            await asyncio.sleep(float(probe.get("periodSeconds", 10)))

    async def _kill(self, process: asyncio.subprocess.Process, why: str) -> None:
        log.info("container %s %s, restarting it", self.name, why)
        self.host.event("Normal", "Killing", f"Container {self.name} {why}, will be restarted", self.name)
        await stop_group(process, self.host.grace_period)


async def _initial_delay(probe: Obj, t0: float) -> None:
    remaining = float(probe.get("initialDelaySeconds", 0)) - (time.monotonic() - t0)
    if remaining > 0:
        await asyncio.sleep(remaining)


def port_map(container: Obj) -> Mapping[str, int]:
    """The container's named ports, for probes that refer to a port by name."""
    return {str(p["name"]): int(p["containerPort"]) for p in container.get("ports") or [] if p.get("name")}
