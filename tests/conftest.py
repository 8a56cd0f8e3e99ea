"""Test tiers and the shared fixtures.

Tiers are marked from their folder (tests/unit, tests/integration, tests/e2e), so `-m unit` or
`pytest tests/unit` select the same tests. Only tests that ask for `kube_cluster` (directly or via
`namespace` / `kube_client`) start the local control plane.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import kube_client, kube_cluster, namespace
from tests.support.fake_llm import fake_anthropic, fake_openai
from tests.support.mcp_peers import mcp_peers, server_everything
from tests.support.operator import pallas_crds, pallas_operator  # noqa: F401
from tests.support.postgres import postgres

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "e2e")

# Fixtures shared by every tier; each module in tests/support owns its own.
__all__ = [
    "fake_anthropic",
    "fake_openai",
    "kube_client",
    "kube_cluster",
    "mcp_peers",
    "namespace",
    "postgres",
    "server_everything",
]


@pytest.fixture(autouse=True, scope="session")
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Conversations of `pallas run` (SQLite under $XDG_STATE_HOME) go to a throw-away folder."""
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """A command run in-process (`command.run(args)`) configures logging for a whole process: its
    handler would outlive the test, writing to a capture stream that pytest has closed by then."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.relative_to(TESTS).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: tests live under one of tests/{{{','.join(TIERS)}}}/")
        item.add_marker(getattr(pytest.mark, tier))
