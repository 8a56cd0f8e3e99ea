r"""Package docstrings that list their modules name real ones, and miss none (docstrings stay true).

A package whose docstring is a module list (lines `- \`name\`, \`other\`: what they do`) is a map a
newcomer reads first; a renamed or deleted module must not leave it pointing at nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = [REPO / folder for folder in ("api", "operator", "runtime", "registry")]
ITEM = re.compile(r"^- (?P<head>[^:]+):", re.MULTILINE)
NAME = re.compile(r"`([a-z_][a-z0-9_]*)`")
MENTION = re.compile(r"`([a-z_][a-z0-9_]*)(?:[./`(])")


def _mapped_packages() -> list[Path]:
    found = []
    for source in SOURCES:
        for init in sorted(source.rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            if ITEM.search(doc):
                found.append(init.parent)
    return found


def _modules(package: Path) -> set[str]:
    names = {p.stem for p in package.glob("*.py") if p.stem not in {"__init__", "__main__"}}
    names |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    return names


def _doc(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


def _listed(package: Path) -> set[str]:
    """The names that head a list item: each must be a module of the package."""
    return {name for item in ITEM.finditer(_doc(package)) for name in NAME.findall(item["head"])}


def _mentioned(package: Path) -> set[str]:
    """Every module named anywhere in the docstring: `name`, `name.Thing` or `name/`."""
    return set(MENTION.findall(_doc(package)))


PACKAGES = _mapped_packages()


def test_some_packages_are_mapped():
    assert len(PACKAGES) >= 5, PACKAGES


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_module_list_names_only_modules_that_exist(package: Path):
    assert _listed(package) <= _modules(package), sorted(_listed(package) - _modules(package))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_docstring_misses_no_module(package: Path):
    assert _modules(package) <= _mentioned(package), sorted(_modules(package) - _mentioned(package))
