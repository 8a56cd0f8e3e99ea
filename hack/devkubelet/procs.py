"""Process groups of the containers, recorded so that no run of the dev kubelet leaves orphans.

Every container runs as the leader of its own process group (and session). The table of live
groups is written to `<state dir>/dev-kubelet/<node>.json` on every change; a dev kubelet that
starts after a crash kills whatever the previous run recorded. A process id can be recycled, so a
recorded group is only killed if its leader still has the recorded start time, or, when the
leader has exited, if processes remain in the group (Linux keeps a group's id reserved while any
member lives, so such members are ours).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path


class AlreadyRunning(Exception):
    """Another dev kubelet holds the lock for this node."""


@dataclass(frozen=True)
class Group:
    """One container process group."""

    pgid: int
    start_time: int
    pod: str
    container: str


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(data[data.rindex(")") + 2 :].split()[19])


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is pgid."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            data = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = data[data.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a process group; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ProcessTable:
    """The live container groups of this node, mirrored to the state file."""

    def __init__(self, state_dir: Path, node: str) -> None:
        folder = state_dir / "dev-kubelet"
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{node}.json"
        self._lock_path = folder / f"{node}.lock"
        self._lock_fd: int | None = None
        self._groups: dict[int, Group] = {}

    def lock(self) -> None:
        """Hold the node's lock for the life of this process (released by the kernel on exit)."""
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(str(self._lock_path)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def reap_previous(self) -> list[Group]:
        """Kill the groups a previous run recorded and did not stop; the ones that were killed."""
        try:
            recorded = [Group(**g) for g in json.loads(self.path.read_text()).get("groups", [])]
        except (OSError, ValueError, TypeError):
            recorded = []
        killed = [g for g in recorded if _is_ours(g)]
        for group in killed:
            signal_group(group.pgid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while any(group_members(g.pgid) for g in killed) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._save()
        return killed

    def add(self, pid: int, pod: str, container: str) -> None:
        self._groups[pid] = Group(pid, start_time(pid) or 0, pod, container)
        self._save()

    def remove(self, pid: int) -> None:
        if self._groups.pop(pid, None) is not None:
            self._save()

    def groups(self) -> list[Group]:
        return list(self._groups.values())

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "groups": [asdict(g) for g in self._groups.values()]}))
        tmp.replace(self.path)


def _is_ours(group: Group) -> bool:
    leader = start_time(group.pgid)
    if leader is not None:
        return leader == group.start_time
    return bool(group_members(group.pgid))
