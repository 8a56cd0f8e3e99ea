"""The agent's config file, read again when it changes: the ConfigMap volume the kubelet updates.

The kubelet writes a new version of a ConfigMap volume into a fresh directory and swaps the
volume's `..data` symlink in one rename; `agent.yaml` is a symlink through it. A `stat` that
follows the links therefore sees a new file (a new inode) once the swap is done, and reading it
gives the whole new text, never half of it. `changed()` costs that one `stat` when nothing
changed, so it is asked at every turn and every `get_health` (`agent.live.LiveAgent.refresh`).

A file that no longer parses is refused with one error line per version and the agent runs on
with the config it has (the operator renders valid configs; a hand edit or a skewed version may
not be).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pallas_api.config import AgentConfig, ConfigError, load_config
from pallas_api.live import config_digest

log = logging.getLogger("pallas.agent")

Stamp = tuple[int, int, int, int]
"""(device, inode, size, mtime in ns) of the file the path leads to."""


def _stamp(path: Path) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class ConfigFile:
    """`pallas agent --config FILE`: the config at start, then each version that differs."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: Stamp | None = None
        self._digest: str | None = None
        self.rejected = 0
        """How many new versions were not valid (`changed` logged each and returned None)."""

    def load(self) -> tuple[AgentConfig, str]:
        """The config now and its hash.

        Raises:
            ConfigError: it cannot be read or is not a valid config (the text names the field).
        """
        stamp = _stamp(self.path)
        config, digest = self._read()
        self._stamp, self._digest = stamp, digest
        return config, digest

    def _read(self) -> tuple[AgentConfig, str]:
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot read ({exc.strerror})") from None
        return load_config(self.path, text=data.decode("utf-8", "replace")), config_digest(data)

    def changed(self) -> tuple[AgentConfig, str] | None:
        """A new version of the file and its hash; None when it did not change or is not valid."""
        stamp = _stamp(self.path)
        if stamp is None or stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            data = self.path.read_bytes()
        except OSError:
            return None  # in the middle of a swap: the next look finds the new file
        digest = config_digest(data)
        if digest == self._digest:
            return None
        self._digest = digest
        try:
            return load_config(self.path, text=data.decode("utf-8", "replace")), digest
        except ConfigError as exc:
            problem = str(exc)
        log.error("the new config %s is not applied: %s", digest[:12], problem)
        self.rejected += 1
        return None
