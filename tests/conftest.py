"""Test tiers and the shared fixtures.

Tiers are marked from their folder (tests/unit, tests/integration, tests/e2e), so `-m unit` or
`pytest tests/unit` select the same tests. Only tests that ask for `kube_cluster` (directly or via
`namespace` / `kube_client`) start the local control plane.

Under pytest-xdist (`-n N --dist loadgroup`, as `make check` and `make test` run) the tests that
share the local cluster's node or its machine-wide set-up run on one worker, one after another
(`NODE_GROUP`), and so do the tests of the control plane (`CLUSTER_GROUP`); every other test goes
to whichever worker is free.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.nodeid import coerce_node_id

from tests.support.cluster import kube_client, kube_cluster, namespace, stop_started_cluster
from tests.support.fake_llm import fake_anthropic, fake_openai
from tests.support.mcp_peers import mcp_peers, server_everything
from tests.support.operator import pallas_crds, pallas_operator  # noqa: F401
from tests.support.postgres import postgres
from tests.support.workers import finish_run, run_dir

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "e2e")
# The lane of what the whole cluster or machine shares: the e2e tier and the integration modules
# that run the node or the cluster script themselves (a drill on the node, a drain or a power cut,
# must not meet another module's pods), that install the chart (a release owns cluster-scoped
# ClusterRoles, which a second release at the same time may not take over), or that run a
# cluster-wide operator (test_existing_objects: it would reconcile the e2e agents beside their
# own operator).
NODE_GROUP = "node"
NODE_MODULES = (
    "tests/integration/test_hack_cluster.py",
    "tests/integration/test_local_node.py",
    "tests/integration/chart/test_helm_install.py",
    "tests/integration/operator/test_existing_objects.py",
    # Its alerts are timed against one-second scrapes and evaluations of a real Prometheus: beside
    # the other lanes on two cores they came late in three runs of three (alone: never). Here it
    # runs after the e2e tier, when the other lanes are done.
    "tests/integration/monitoring/test_monitoring.py",
)
# Single tests that change what the whole cluster shares: the ServiceMonitor CRD test deletes the
# Prometheus Operator's CRD, which the e2e consumers' Prometheus watches (it stopped scraping
# when the two overlapped).
NODE_TESTS = (
    "tests/integration/operator/test_deployment.py::test_service_monitors_follow_the_crd_and_the_setting",
)
# Integration tests of the control plane (operators, CRDs, the chart, the registry's watch): one
# after another, as each was written to run, but beside the node's lane and the cluster-free tests.
CLUSTER_GROUP = "cluster"
# A unit test that takes longer fails (pytest-timeout), so a slow one cannot creep into the tier
# (kopf caps its unit tests at 2 s, fastmcp at 5 s). `make test` raises it: there the unit tests
# share two cores with the cluster and the other lanes.
UNIT_TIMEOUT = float(os.environ.get("PALLAS_UNIT_TIMEOUT", "5"))

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


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        run_dir()


_TIER_TIMES: dict[str, list[float]] = {}
"""Per tier: the earliest start, the latest stop and the summed duration of its tests' phases."""
_WORKER_TIMES: dict[str, list[float]] = {}
"""The same per xdist worker (its lane): how full each worker was."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = report.nodeid.split("/", 2)[1] if report.nodeid.startswith("tests/") else "other"
    node = getattr(report, "node", None)
    worker = str(getattr(getattr(node, "gateway", None), "id", "main"))
    for times, key in ((_TIER_TIMES, tier), (_WORKER_TIMES, worker)):
        first, last, busy = times.get(key, [report.start, report.stop, 0.0])
        times[key] = [min(first, report.start), max(last, report.stop), busy + report.duration]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each tier's wall time (its first test's start to its last test's end) beside the time its
    tests took one after another, so a run shows what running side by side saved."""
    if hasattr(terminalreporter.config, "workerinput") or not _TIER_TIMES:
        return
    terminalreporter.section("time per tier, and per worker")
    for times in (_TIER_TIMES, _WORKER_TIMES):
        for key in sorted(times):
            first, last, busy = times[key]
            wall = last - first
            terminalreporter.write_line(f"{key:<12} wall {wall:8.1f}s   tests one after another {busy:8.1f}s")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # every worker has finished by now
        stop_started_cluster()
        finish_run()


# First: xdist's own hook reads the xdist_group markers to name each test's lane.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(TESTS)
        tier = where.parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: tests live under one of tests/{{{','.join(TIERS)}}}/")
        item.add_marker(getattr(pytest.mark, tier))
        if tier == "unit" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT))
        group = _xdist_group(item, tier, f"tests/{where.as_posix()}")
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
            # xdist sets `loadgroup` only when it runs workers (not with `-n 0` or `-p no:xdist`).
            if getattr(config.option, "loadgroup", False) and "@" not in item.nodeid:
                _name_lane(item, group)


def _name_lane(item: pytest.Item, group: str) -> None:
    """Suffix the test's id with its group, which is how `--dist loadgroup` schedules.

    pytest-xdist 3.8 does it itself by assigning `item._nodeid`, which pytest 9 no longer reads
    (the id is the structured `item._id`): without this, every test goes to any worker and two
    e2e modules install the chart at once. The suffixed id is the one xdist would make.
    """
    item._id = coerce_node_id(f"{item.nodeid}@{group}")


def _xdist_group(item: pytest.Item, tier: str, path: str) -> str | None:
    if tier == "e2e" or path in NODE_MODULES or item.nodeid in NODE_TESTS:
        return NODE_GROUP
    if "kube_cluster" in getattr(item, "fixturenames", ()):
        return CLUSTER_GROUP
    return None
