"""What an agent imports as it starts, read from the source: the heavy libraries stay lazy.

Each provider SDK costs over a second of imports and MBs of RSS, SQLAlchemy and the drivers
~0.3 s, the A2A SDK ~28 MB: an agent loads only the SDK of its own provider, the database layer
only for a database store, and the A2A SDK only with `spec.a2a.enabled`. This walks the imports
the packages run when a module is imported (the module's top level, class bodies and `if`/`try`
blocks; not function bodies, not `if TYPE_CHECKING:`) from an agent's entry modules, and fails
naming the chain of modules that brings a library in. It replaces the cold-start probes that
started interpreters; what only a real interpreter sees (the libraries' own imports, the A2A
SDK's SQL stores marked unimportable) stays one smoke test in
`tests/integration/tooling/test_cold_start.py`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE_FOLDERS = {
    "pallas_api": REPO / "api" / "pallas_api",
    "pallas_io": REPO / "api" / "pallas_io",
    "pallas_runtime": REPO / "runtime" / "pallas_runtime",
}

# What every agent process imports whatever its provider and store.
AGENT = (
    "pallas_runtime.commands.agent",
    "pallas_runtime.server",
    "pallas_runtime.agent.live",
    "pallas_runtime.llm.factory",
)
OPENAI = ("pallas_runtime.llm.openai_chat", "pallas_runtime.llm.openai_responses")
ANTHROPIC = ("pallas_runtime.llm.anthropic_messages",)
MEMORY_STORE = (
    "pallas_runtime.conversations.memory",
    "pallas_runtime.spending.factory",
    "pallas_runtime.spending.ledger",
)
DATABASE = frozenset({"sqlalchemy", "alembic", "asyncpg", "aiosqlite"})
CRD_MODELS = frozenset({"pallas_api.spec", "pallas_api.status"})
"""The CRDs' spec and status models: the operator's and `pallas run`'s, ~0.3 s of an agent's start."""


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGE_FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_at_import(body: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported, blocks flattened."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _run_at_import(node.body)
            yield from _run_at_import(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _run_at_import(block)
        elif isinstance(node, ast.With | ast.ClassDef):
            yield from _run_at_import(node.body)


def eager_imports(module: str, source: str) -> set[str]:
    """The dotted modules `module` imports as it is imported (a package's name for its `__init__`)."""
    is_package = MODULES.get(module, Path()).name == "__init__.py"
    here = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _run_at_import(ast.parse(source).body):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
    return found


def chains(entries: Iterable[str]) -> dict[str, list[str]]:
    """Every module imported from `entries`, with the chain of modules that imports it."""
    chain: dict[str, list[str]] = {}
    todo = [(entry, [entry]) for entry in entries]
    while todo:
        module, path = todo.pop()
        # Importing a.b.c runs a/__init__ and a/b/__init__ first.
        parts = module.split(".")
        for name in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
            if name in chain:
                continue
            chain[name] = path if name == module else [*path[:-1], name]
            if name in MODULES:
                for imported in eager_imports(name, MODULES[name].read_text()):
                    todo.append((imported, [*chain[name], imported]))
    return chain


def brought_in(entries: Iterable[str], libraries: Iterable[str]) -> dict[str, str]:
    """Each of `libraries` the entries import, with the chain that brings it in."""
    seen = chains(entries)
    return {lib: " -> ".join(seen[lib]) for lib in sorted(libraries) if lib in seen}


def test_the_walk_follows_top_level_imports_and_skips_lazy_ones():
    source = (
        "from typing import TYPE_CHECKING\nimport json\nfrom pallas_runtime.llm.provider import LLMProvider\n"
        "if TYPE_CHECKING:\n    import anthropic\nelse:\n    import yaml\n"
        "try:\n    import orjson\nexcept ImportError:\n    orjson = None\n"
        "class A:\n    import enum\n"
        "def later():\n    import openai\n"
    )
    found = eager_imports("pallas_runtime.llm.factory", source)
    assert found == {"typing", "json", "pallas_runtime.llm.provider", "yaml", "orjson", "enum"}


def test_relative_imports_resolve_inside_the_package():
    assert eager_imports("pallas_runtime.llm.factory", "from . import provider\nfrom .sse import x\n") == {
        "pallas_runtime.llm",
        "pallas_runtime.llm.provider",
        "pallas_runtime.llm.sse",
    }


def test_the_walk_names_the_chain_to_a_library():
    found = brought_in(["pallas_runtime.llm.anthropic_messages"], ["anthropic"])
    assert found["anthropic"].startswith("pallas_runtime.llm.anthropic_messages -> ")


@pytest.mark.parametrize("entry", [*AGENT, *OPENAI, *ANTHROPIC, *MEMORY_STORE, "pallas_runtime.server.a2a"])
def test_every_entry_module_exists(entry: str):
    assert entry in MODULES


@pytest.mark.parametrize(
    ("entries", "absent"),
    [
        (AGENT, {"openai", "anthropic", "a2a", "pallas_runtime.server.a2a"} | DATABASE | CRD_MODELS),
        ((*AGENT, *OPENAI), {"anthropic"}),
        ((*AGENT, *ANTHROPIC), {"openai"}),
        ((*AGENT, *MEMORY_STORE, "pallas_runtime.server.a2a"), DATABASE),
    ],
    ids=["any-agent", "openai-agent", "anthropic-agent", "memory-store-a2a-agent"],
)
def test_an_agent_imports_only_what_its_config_uses(entries: tuple[str, ...], absent: set[str]):
    assert not brought_in(entries, absent), brought_in(entries, absent)
