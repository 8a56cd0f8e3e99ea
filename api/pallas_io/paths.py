"""Where Pallas keeps state on a workstation (`pallas run`): the XDG state directory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/pallas` (`~/.local/state/pallas` by default), as the original Pallas."""
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(state) / "pallas"
