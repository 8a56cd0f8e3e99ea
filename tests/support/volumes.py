"""A ConfigMap or Secret volume laid out and updated exactly as the kubelet's atomic writer does.

The kubelet (`pkg/volume/util/atomic_writer.go`) writes each version of a volume into a fresh
hidden directory `..<timestamp>`, points the symlink `..data` at it by creating `..data_tmp` and
renaming it over `..data` (one atomic step), and gives every file a symlink `name -> ..data/name`.
`KubeletVolume` does the same in a temporary folder, so a process under test sees what an agent
pod sees when a ConfigMap is edited or a Secret rotated: the old version or the new one, whole.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from pathlib import Path

_versions = itertools.count(1)


class KubeletVolume:
    """A volume folder whose whole content `write` replaces at once."""

    def __init__(self, folder: Path, files: Mapping[str, str | bytes]) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.write(files)

    def write(self, files: Mapping[str, str | bytes]) -> None:
        """Make `files` the volume's content (files not named disappear), as one swap."""
        version = self.folder / f"..2026_11_27_{next(_versions):06d}"
        version.mkdir()
        for name, content in files.items():
            (version / name).write_bytes(content.encode() if isinstance(content, str) else content)
        staged = self.folder / "..data_tmp"
        staged.unlink(missing_ok=True)
        staged.symlink_to(version.name)
        old = os.readlink(self.folder / "..data") if (self.folder / "..data").is_symlink() else None
        staged.rename(self.folder / "..data")
        for name in files:
            link = self.folder / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")
        for entry in self.folder.iterdir():
            if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in files:
                entry.unlink()
        if old is not None:
            for stale in (self.folder / old).iterdir():
                stale.unlink()
            (self.folder / old).rmdir()
