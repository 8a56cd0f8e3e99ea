"""Every module of every package stands in an import contract, so `lint-imports` covers it.

import-linter checks only the modules a contract names: a module left out of the layers floats,
free to import anything above it, and its floor is whatever its imports happen to make it (nine
of the runtime's top-level modules did, code review 2026-12-06 §4). This test reads the
contracts in pyproject.toml and fails on a module or package on disk that its package's layers
contract does not name, and on any module, at any depth, that no contract names (itself or a
package above it, short of the whole program).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

# The containers whose every child must be named in the layers contract of that name prefix.
LAYERED = {
    "pallas_api": (REPO / "api" / "pallas_api", "Contract layers:"),
    "pallas_io": (REPO / "api" / "pallas_io", "I/O sibling layers:"),
    "pallas_runtime": (REPO / "runtime" / "pallas_runtime", "Runtime layers:"),
    "pallas_runtime.server": (REPO / "runtime" / "pallas_runtime" / "server", "Agent server:"),
    "pallas_operator": (REPO / "operator" / "pallas_operator", "Operator layers:"),
    "pallas_registry": (REPO / "registry" / "pallas_registry", "Registry layers:"),
}
# Every package of the product: the root of each is `root_packages` in pyproject.toml.
PACKAGES = {
    "pallas_api": REPO / "api" / "pallas_api",
    "pallas_io": REPO / "api" / "pallas_io",
    "pallas_runtime": REPO / "runtime" / "pallas_runtime",
    "pallas_operator": REPO / "operator" / "pallas_operator",
    "pallas_registry": REPO / "registry" / "pallas_registry",
}


def children(folder: Path, container: str) -> set[str]:
    """The modules and packages directly inside a package, by their dotted names."""
    found = {f"{container}.{p.stem}" for p in folder.glob("*.py") if p.name != "__init__.py"}
    found |= {f"{container}.{p.name}" for p in folder.iterdir() if (p / "__init__.py").is_file()}
    return found


def named(layers: list[str]) -> set[str]:
    """The modules a layers contract names (`|`: independent siblings, `:`: siblings importing each other)."""
    return {m.strip() for layer in layers for part in layer.split("|") for m in part.split(":")}


def modules(folder: Path, package: str) -> set[str]:
    """Every module and package below a package, at any depth, by its dotted name."""
    found = set()
    for path in folder.rglob("*.py"):
        parts = path.relative_to(folder).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            found.add(".".join((package, *parts)))
    return found


def contract_names(contract: dict[str, object]) -> set[str]:
    """The modules a contract constrains: its layers, its independent modules, its forbidden sources."""
    layers = contract.get("layers")
    names = named(layers) if isinstance(layers, list) else set()
    for key in ("modules", "source_modules"):
        listed = contract.get(key)
        if isinstance(listed, list):
            names |= {str(m) for m in listed}
    return names


def uncovered(found: set[str], contracts: list[dict[str, object]], roots: set[str]) -> set[str]:
    """The modules no contract names, neither itself nor a package between it and its root."""
    names = set().union(*(contract_names(c) for c in contracts)) - roots

    def covered(module: str) -> bool:
        parts = module.split(".")
        return any(".".join(parts[:n]) in names for n in range(2, len(parts) + 1))

    return {m for m in found if not covered(m)}


def _contracts() -> list[dict[str, Any]]:
    found = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert isinstance(found, list)
    return found


def _contract(prefix: str) -> dict[str, Any]:
    contracts = _contracts()
    [found] = [c for c in contracts if c["name"].startswith(prefix) and c["type"] == "layers"]
    return found


def test_named_reads_both_kinds_of_sibling() -> None:
    assert named(["a.b | a.c", "a.d : a.e", "a.f"]) == {"a.b", "a.c", "a.d", "a.e", "a.f"}


@pytest.mark.parametrize("container", sorted(LAYERED))
def test_every_module_stands_in_its_layers_contract(container: str) -> None:
    folder, prefix = LAYERED[container]
    layers = _contract(prefix)["layers"]
    assert isinstance(layers, list)
    floating = children(folder, container) - named(layers)
    assert not floating, f"outside the layers contract {prefix!r} in pyproject.toml: {sorted(floating)}"
    gone = {m for m in named(layers) if m.startswith(container + ".")} - children(folder, container)
    assert not gone, f"the layers contract {prefix!r} names modules that do not exist: {sorted(gone)}"


def test_every_package_of_the_product_is_a_root_package() -> None:
    roots = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    assert set(roots) == set(PACKAGES)


def test_uncovered_finds_a_module_no_contract_names() -> None:
    contracts: list[dict[str, object]] = [
        {"type": "layers", "layers": ["p.a | p.b"]},
        {"type": "forbidden", "source_modules": ["p"], "forbidden_modules": ["q"]},
    ]
    found = {"p.a", "p.a.deep", "p.b", "p.new"}
    assert uncovered(found, contracts, roots={"p"}) == {"p.new"}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_module_at_any_depth_stands_in_a_contract(package: str) -> None:
    found = modules(PACKAGES[package], package)
    floating = uncovered(found, _contracts(), roots=set(PACKAGES))
    assert not floating, f"in no import contract of pyproject.toml: {sorted(floating)}"
