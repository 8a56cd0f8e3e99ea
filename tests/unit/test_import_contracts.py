"""Every module of a layered package stands in its layers contract, so `lint-imports` covers it.

import-linter checks only the modules a contract names: a module left out of the layers floats,
free to import anything above it, and its floor is whatever its imports happen to make it (nine
of the runtime's top-level modules did, code review 2026-12-06 §4). This test reads the
contracts in pyproject.toml and fails on a module or package on disk that its contract's layers
do not name.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The containers whose every child must be named in the layers contract of that name prefix.
LAYERED = {
    "pallas_runtime": (REPO / "runtime" / "pallas_runtime", "Runtime layers:"),
    "pallas_runtime.server": (REPO / "runtime" / "pallas_runtime" / "server", "Agent server:"),
    "pallas_operator": (REPO / "operator" / "pallas_operator", "Operator layers:"),
}


def children(folder: Path, container: str) -> set[str]:
    """The modules and packages directly inside a package, by their dotted names."""
    found = {f"{container}.{p.stem}" for p in folder.glob("*.py") if p.name != "__init__.py"}
    found |= {f"{container}.{p.name}" for p in folder.iterdir() if (p / "__init__.py").is_file()}
    return found


def named(layers: list[str]) -> set[str]:
    """The modules a layers contract names (`|`: independent siblings, `:`: siblings importing each other)."""
    return {m.strip() for layer in layers for part in layer.split("|") for m in part.split(":")}


def _contract(prefix: str) -> dict[str, object]:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [found] = [c for c in contracts if c["name"].startswith(prefix) and c["type"] == "layers"]
    return found


def test_named_reads_both_kinds_of_sibling():
    assert named(["a.b | a.c", "a.d : a.e", "a.f"]) == {"a.b", "a.c", "a.d", "a.e", "a.f"}


@pytest.mark.parametrize("container", sorted(LAYERED))
def test_every_module_stands_in_its_layers_contract(container: str):
    folder, prefix = LAYERED[container]
    layers = _contract(prefix)["layers"]
    assert isinstance(layers, list)
    floating = children(folder, container) - named(layers)
    assert not floating, f"outside the layers contract {prefix!r} in pyproject.toml: {sorted(floating)}"
    gone = {m for m in named(layers) if m.startswith(container + ".")} - children(folder, container)
    assert not gone, f"the layers contract {prefix!r} names modules that do not exist: {sorted(gone)}"
