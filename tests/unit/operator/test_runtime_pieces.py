"""The operator's small moving parts: service resolution, the work queue, the prober, the HTTP
endpoints, the command line and managed-fields fingerprints. Time-based tests run on looptime's
fake event-loop clock: deterministic on a loaded machine, and instant."""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import json
import logging
import os
from collections.abc import Hashable, Mapping
from pathlib import Path

import pytest

from pallas_io.logs import setup_logging
from pallas_operator.cli import OperatorCommand
from pallas_operator.engine.context import key_fields
from pallas_operator.engine.prober import Prober, ProbeTarget
from pallas_operator.engine.provider_reports import ProviderReports, ReportSource, _checks
from pallas_operator.engine.queue import WorkQueue
from pallas_operator.k8s.apply import fingerprint
from pallas_operator.service_resolver import ServiceResolver, parse_pairs
from pallas_operator.status import HealthResult, ProviderCheck, ProviderReport, Verification

SVC = "http://research.agents.svc.cluster.local:8000/mcp"


def test_resolver_maps_host_and_port_or_host_only() -> None:
    resolver = ServiceResolver(parse_pairs("research.agents.svc.cluster.local:8000=127.0.0.1:4100", "test"))
    assert resolver.resolve(SVC) == "http://127.0.0.1:4100/mcp"
    assert resolver.resolve(SVC.replace("8000", "9000")) == SVC.replace("8000", "9000")
    by_host = ServiceResolver({"research.agents.svc.cluster.local": "localhost"})
    assert by_host.resolve(SVC) == "http://localhost:8000/mcp"


def test_resolver_rereads_its_map_file(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("# agents\nresearch.agents.svc.cluster.local:8000=127.0.0.1:1\n")
    resolver = ServiceResolver(map_file=path)
    assert resolver.resolve(SVC) == "http://127.0.0.1:1/mcp"
    path.write_text("research.agents.svc.cluster.local:8000=127.0.0.1:2\n")
    os.utime(path, (1, 1))
    assert resolver.resolve(SVC) == "http://127.0.0.1:2/mcp"


def test_bad_pairs_are_refused_with_the_source_named() -> None:
    with pytest.raises(ValueError, match="PALLAS_SERVICE_HOST_OVERRIDES: 'nonsense'"):
        parse_pairs("a=b,nonsense", "PALLAS_SERVICE_HOST_OVERRIDES")


@pytest.mark.looptime
async def test_queue_collapses_repeats_and_never_runs_a_key_twice_at_once() -> None:
    running: set[Hashable] = set()
    calls: list[Hashable] = []

    async def reconcile(key: Hashable) -> float | None:
        assert key not in running
        running.add(key)
        calls.append(key)
        await asyncio.sleep(0.05)
        running.discard(key)
        return None

    queue = WorkQueue(reconcile, workers=3)
    queue.start()
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    await asyncio.sleep(0.01)
    queue.add("a")  # while "a" runs: once more afterwards, not in parallel
    await asyncio.sleep(0.2)
    await queue.drained()
    await queue.stop()
    assert sorted(calls) == ["a", "a", "b"]


@pytest.mark.looptime
async def test_queue_retries_failures_with_backoff() -> None:
    attempts: list[float] = []

    async def reconcile(key: Hashable) -> float | None:
        attempts.append(asyncio.get_running_loop().time())
        if len(attempts) < 3:
            raise RuntimeError("API server unavailable")
        return None

    queue = WorkQueue(reconcile, workers=1, max_backoff=10)
    queue.start()
    queue.add("a")
    await asyncio.sleep(100)  # fake loop time: the retries come after 1 s, then 2 s
    await queue.stop()
    assert len(attempts) == 3
    assert [round(b - a, 3) for a, b in itertools.pairwise(attempts)] == [1.0, 2.0]


async def test_every_line_of_a_reconcile_names_what_it_reconciles() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = list(root.handlers)
    setup_logging({"PALLAS_LOG_FORMAT": "json"}, stream=stream)
    try:

        async def reconcile(key: Hashable) -> float | None:
            logging.getLogger("pallas_operator.test").info("reconciling")
            raise RuntimeError("API server unavailable")

        queue = WorkQueue(reconcile, workers=1, fields=key_fields)
        queue.start()
        queue.add(("agent", "team-a", "research"))
        await queue.drained()
        await queue.stop()
    finally:
        root.handlers[:] = saved
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["message"].split("\n")[0], e["agent"], e["namespace"]) for e in lines] == [
        ("reconciling", "research", "team-a"),
        (
            "reconcile of ('agent', 'team-a', 'research') failed (attempt 1); retrying in 1.0s",
            "research",
            "team-a",
        ),
    ]
    assert key_fields(("deployment", "ns", "ouranos")) == {"deployment": "ouranos", "namespace": "ns"}


@pytest.mark.looptime
async def test_prober_verifies_once_per_rollout_and_reports_only_changes() -> None:
    verified: list[str] = []
    health = HealthResult("ok")
    notified: list[Hashable] = []

    async def verify(url: str, budget: float, headers: Mapping[str, str]) -> Verification:
        assert headers == {}  # auth.mode none: no credentials
        verified.append(url)
        return Verification(ok=True, tools=("get_health",))

    async def check(url: str, budget: float, headers: Mapping[str, str]) -> HealthResult:
        return health

    prober = Prober(ServiceResolver({"a.ns.svc.cluster.local": "127.0.0.1"}), notified.append, verify, check)
    target = ProbeTarget("http://a.ns.svc.cluster.local:8000/mcp", 0.05, 1, 1, "hash-1")
    prober.track("a", target)
    await asyncio.sleep(0.2)
    assert verified == ["http://127.0.0.1:8000/mcp"]
    assert notified == ["a"]
    health = HealthResult("degraded", "argos down")
    await asyncio.sleep(0.15)
    assert notified == ["a", "a"]
    assert prober.results("a") == (Verification(ok=True, tools=("get_health",)), health)
    prober.track("a", ProbeTarget(target.url, 0.05, 1, 1, "hash-2"))
    await asyncio.sleep(0.1)
    assert len(verified) == 2
    prober.track("a", None)
    assert prober.results("a") == (None, None)
    await prober.stop()


@pytest.mark.looptime
async def test_provider_reports_are_read_through_the_resolver_and_notify_only_changes() -> None:
    read: list[tuple[str, str]] = []
    report = ProviderReport((ProviderCheck("vllm", "openai", "ok"),))
    notified: list[Hashable] = []

    async def fake_read(url: str, deployment: str, budget: float) -> ProviderReport:
        read.append((url, deployment))
        return report

    reports = ProviderReports(
        ServiceResolver({"r.ns.svc.cluster.local": "127.0.0.1"}), notified.append, fake_read
    )
    source = ReportSource("http://r.ns.svc.cluster.local:8080/healthz", "ouranos", 0.05, 1, expected=1)
    reports.track("d", source)
    await asyncio.sleep(0.2)
    assert read[0] == ("http://127.0.0.1:8080/healthz", "ouranos")
    assert len(read) > 2  # read every interval
    assert notified == ["d"]  # but only a change is news
    assert reports.report("d") == report
    report = ProviderReport(None, "GET ...: ConnectError")
    await asyncio.sleep(0.15)
    assert notified == ["d", "d"]
    reports.track("d", None)
    assert reports.report("d") is None
    await reports.stop()


def test_a_report_keeps_its_deployments_providers_and_refuses_what_is_not_one() -> None:
    body = {
        "status": "degraded",
        "providers": [
            {"deployment": "ouranos", "name": "vllm", "type": "openai", "status": "ok", "models": ["m"]},
            {"deployment": "other", "name": "x", "type": "openai", "status": "ok"},
            {"name": "spare", "type": "anthropic", "status": "error", "message": "HTTP 401"},
        ],
    }
    assert _checks(body, "ouranos") == (
        ProviderCheck("vllm", "openai", "ok", "", ("m",)),
        ProviderCheck("spare", "anthropic", "error", "HTTP 401"),
    )
    for bad in ({"status": "ok"}, [], {"providers": [{"name": "x", "status": "fine"}]}):
        with pytest.raises(ValueError, match=r"providers|status"):
            _checks(bad, "ouranos")


def test_command_refuses_namespaces_with_all_namespaces() -> None:
    command = OperatorCommand()
    parser = argparse.ArgumentParser()
    command.configure(parser)
    args = parser.parse_args(["--namespace", "a", "--all-namespaces"])
    assert command.run(args) == 2
    assert parser.parse_args([]).runtime_image.startswith("pallas:")


def test_fingerprint_covers_only_the_operators_own_apply_entry() -> None:
    entry = {
        "manager": "pallas-operator",
        "operation": "Apply",
        "apiVersion": "v1",
        "fieldsV1": {"f:data": {}},
    }
    other = {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "v1", "fieldsV1": {"f:x": {}}}
    status = {**entry, "subresource": "status", "fieldsV1": {"f:status": {}}}
    obj = {"metadata": {"managedFields": [entry, other, status]}}
    assert fingerprint(obj) == fingerprint({"metadata": {"managedFields": [entry]}})
    assert fingerprint(obj) != fingerprint({"metadata": {"managedFields": [{**entry, "fieldsV1": {}}]}})
    assert fingerprint({"metadata": {}}) == ""
