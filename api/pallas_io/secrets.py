"""Where a Pallas process finds its secret values: a mapping of names to values, read when asked.

The rendered config never holds a secret; it names one (`provider.apiKeyEnv`, a header's
`valueFromEnv`, `conversations.dsnEnv`) and the process looks the name up in a
`Mapping[str, str]`, the one small abstraction every reader takes:

- under `pallas run` it is the environment (`.env` files and Secret manifests filled in), a
  dict fixed per plan that `--reload` replaces;
- in a pod it is `SecretFiles`: the files of the pod's Secret volume, one per name, read at
  each lookup, so a rotated Secret is seen as soon as the kubelet has written it.

Reading at each lookup rather than watching: the volume is a tmpfs, each value a few bytes, and
a process looks up a handful per turn (its provider key, its servers' headers), so a read costs
microseconds against an LLM call's seconds; no watcher thread, no inotify on the kubelet's
symlinks, no cache to go stale. The kubelet writes a new version into a fresh directory and
swaps the `..data` symlink in one rename, so a read sees the old value or the new one, never a
mix. The readers decide what a changed value means (a new LLM client for the next turn, a new
downstream session); see docs/runtime.md "Live changes".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

KUBELET_ENTRY = ".."
"""Entries the kubelet keeps beside the files (`..data`, `..2026_11_27_…`): never a secret."""


class SecretFiles(Mapping[str, str]):
    """The regular files of `directory` by name, read at each lookup (a Secret volume).

    A name that is not a plain file name, or whose file is missing or unreadable, is not in the
    mapping. Values are decoded as the environment is (UTF-8, undecodable bytes kept as
    surrogates), so a key reads the same from a file as from a `secretKeyRef` variable.
    """

    def __init__(self, directory: str | Path, *, on_read: Callable[[str], None] | None = None) -> None:
        """Read `directory`; `on_read` is told every value read (e.g. to redact it from logs)."""
        self.directory = Path(directory)
        self._on_read = on_read

    def __getitem__(self, name: str) -> str:
        if not name or "/" in name or name.startswith("."):
            raise KeyError(name)
        try:
            data = (self.directory / name).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
            raise KeyError(name) from None
        value = data.decode("utf-8", "surrogateescape")
        if self._on_read is not None:
            self._on_read(value)
        return value

    def __iter__(self) -> Iterator[str]:
        try:
            entries = sorted(os.listdir(self.directory))
        except OSError:
            return iter(())
        return iter([e for e in entries if not e.startswith(KUBELET_ENTRY) and e in self])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self[name]
        except KeyError:
            return False
        return True

    def __repr__(self) -> str:
        return f"SecretFiles({str(self.directory)!r})"
