"""The contract package imports only what a pure model of the contract needs: an allow-list.

pallas_api is imported by the operator, the runtime, the registry and the tools alike; it holds
the models, the rendering and the checks, and nothing that speaks to the network, Kubernetes or a
terminal. The import-linter contract in pyproject.toml forbids the known I/O libraries (and their
transitive imports); this test closes the list the other way round, so a library nobody thought
to forbid fails here too. Every `import` in every module counts, those under TYPE_CHECKING too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "api" / "pallas_api"

# Each allowed third-party module and why a pure contract may use it.
ALLOWED_LIBRARIES = {
    "pallas_api": "the package itself",
    "pydantic": "the models and their validation",
    "pydantic_core": "pydantic's core (the URL types and validation errors)",
    "yaml": "parsing and dumping the config and CRD documents",
    "typing_extensions": "pydantic's typing back-ports",
    "annotated_types": "pydantic's constraint markers (Ge, Le, MaxLen)",
    "croniter": "reading PallasTrigger cron schedules (pure date arithmetic, no I/O)",
    "celpy": "compiling and evaluating an event trigger's `when` (a CEL interpreter, no I/O)",
    "lark": "celpy's parser: reading the tree of a `when` for the variables it names",
}
ALLOWED = frozenset(sys.stdlib_module_names) | ALLOWED_LIBRARIES.keys()


def imported(tree: ast.AST) -> set[str]:
    """The top-level modules a module imports; relative imports stay in the package."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return found


def _strays() -> dict[str, list[str]]:
    strays: dict[str, list[str]] = {}
    for module in sorted(PACKAGE.rglob("*.py")):
        for name in sorted(imported(ast.parse(module.read_text())) - ALLOWED):
            strays.setdefault(name, []).append(module.relative_to(REPO).as_posix())
    return strays


def test_the_walk_sees_the_package():
    assert {"pydantic", "yaml", "pallas_api"} <= imported(ast.parse((PACKAGE / "config.py").read_text()))


def test_the_walk_catches_a_stray_import():
    tree = ast.parse("import httpx2\nfrom anyio.abc import TaskGroup\nfrom . import fields\n")
    assert imported(tree) - ALLOWED == {"httpx2", "anyio"}


def test_the_contract_imports_only_allowed_modules():
    assert not _strays(), f"pallas_api imports modules outside its allow-list: {_strays()}"
