"""The lock files pin what pyproject.toml pins (`make lock` regenerates them)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)$")


def _locked(name: str) -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements" / name).read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", line)
        if match:
            pins[match[1].lower().replace("_", "-")] = match[2]
    return pins


def _direct(extra: str | None) -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *(project["optional-dependencies"][extra] if extra else [])]
    pins = {}
    for spec in specs:
        match = PIN.match(spec)
        assert match, f"pyproject.toml: {spec!r} is not an exact pin"
        pins[match[1].lower().replace("_", "-")] = match[3]
    return pins


@pytest.mark.parametrize(("lock", "extra"), [("runtime.lock", None), ("dev.lock", "dev")])
def test_every_direct_pin_is_locked_at_its_version(lock: str, extra: str | None) -> None:
    locked = _locked(lock)
    stale = {name: version for name, version in _direct(extra).items() if locked.get(name) != version}
    assert not stale, f"requirements/{lock} is stale for {stale}: run `make lock`"
    assert all(
        "--hash=sha256:" in line for line in (REPO / "requirements" / lock).read_text().split("==")[1:]
    )
