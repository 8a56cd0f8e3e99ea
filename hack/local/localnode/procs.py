"""Processes recorded in a cluster's state.json: whether they still run."""

from __future__ import annotations

import json
from pathlib import Path


def process_alive(pid: int, exe: str) -> bool:
    """True when pid is alive *and* still runs exe, so a recycled pid is never signalled."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, UnicodeDecodeError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return cmdline == exe and state != "Z"


def any_recorded_alive(state_dir: Path) -> bool:
    """Whether a process the cluster in `state_dir` started still runs.

    A state folder outlives its processes when the machine restarts or they are killed, so the
    folder alone does not say a cluster runs.
    """
    try:
        procs = json.loads((state_dir / "state.json").read_text()).get("processes", [])
    except (OSError, ValueError, AttributeError):
        return False
    return any(
        isinstance(p, dict) and process_alive(int(p.get("pid", 0)), str(p.get("exe", ""))) for p in procs
    )
