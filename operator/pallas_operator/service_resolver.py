"""How the operator reaches an agent's Service: its cluster DNS name, unless mapped elsewhere.

In a cluster the operator dials `http://<agent>.<ns>.svc.cluster.local:<port>/mcp` directly.
Outside one (development, and tests that run agents as local processes), a host map rewrites
Service addresses to where the agent really listens:

- `PALLAS_SERVICE_HOST_OVERRIDES="research.agents.svc.cluster.local:8000=127.0.0.1:40123,..."`
- `--service-host-map FILE`: the same pairs, one per line (`#` comments), re-read when the file
  changes, so a process that starts agents later can add them while the operator runs.

A pair's left side is `host:port` (or just `host`, for any port); the right side `host:port`
(or `host`, keeping the port).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)
ENV_OVERRIDES = "PALLAS_SERVICE_HOST_OVERRIDES"


def parse_pairs(text: str, source: str) -> dict[str, str]:
    """Parse `from=to` pairs separated by commas or newlines; bad entries raise ValueError."""
    pairs: dict[str, str] = {}
    for raw in text.replace(",", "\n").splitlines():
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        left, sep, right = entry.partition("=")
        if not sep or not left.strip() or not right.strip():
            raise ValueError(f"{source}: {entry!r} is not HOST[:PORT]=HOST[:PORT]")
        pairs[left.strip().lower()] = right.strip()
    return pairs


class ServiceResolver:
    """Maps a Service URL to the URL the operator should dial."""

    def __init__(
        self, overrides: MutableMapping[str, str] | None = None, map_file: Path | None = None
    ) -> None:
        self.overrides: MutableMapping[str, str] = overrides if overrides is not None else {}
        self._map_file = map_file
        self._file_pairs: Mapping[str, str] = {}
        self._file_stamp: float | None = None

    @classmethod
    def from_env(cls, map_file: Path | None = None) -> ServiceResolver:
        """A resolver with the pairs of $PALLAS_SERVICE_HOST_OVERRIDES (and a map file, if given)."""
        return cls(parse_pairs(os.environ.get(ENV_OVERRIDES, ""), ENV_OVERRIDES), map_file)

    def _file(self) -> Mapping[str, str]:
        if self._map_file is None:
            return {}
        try:
            stamp = self._map_file.stat().st_mtime
            if stamp != self._file_stamp:
                self._file_pairs = parse_pairs(self._map_file.read_text(), str(self._map_file))
                self._file_stamp = stamp
        except (OSError, ValueError) as exc:
            log.warning("service host map %s unusable: %s", self._map_file, exc)
        return self._file_pairs

    def resolve(self, url: str) -> str:
        """The URL to dial for `url` (unchanged when nothing maps its host)."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port
        pairs = {**self._file(), **self.overrides}
        target = pairs.get(f"{host}:{port}") or pairs.get(host)
        if target is None:
            return url
        netloc = target if ":" in target or port is None else f"{target}:{port}"
        return urlunsplit(parts._replace(netloc=netloc))
