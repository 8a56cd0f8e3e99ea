"""The operator process: one leader among replicas, probes and metrics, `pallas operator` itself."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease

from tests.support.cluster import LocalCluster
from tests.support.operator import (
    agent,
    deployment,
    eventually,
    get_object,
    in_namespace,
    kubectl_apply,
    running_operator,
    secret,
    total,
)
from tests.support.ports import logged_port

STANDBY_WINDOW = 2.0
"""Seconds the second replica is watched not leading: four of its Lease attempts (every 0.5 s in
tests), each of which must find the first replica's Lease current."""


def _setup(cluster: LocalCluster, ns: str, *agents: str) -> None:
    mod = in_namespace(ns)
    kubectl_apply(
        cluster, secret("llm", None, mod), deployment("ouranos", mod), *(agent(a, mod) for a in agents)
    )


async def test_two_replicas_never_both_act_and_the_standby_takes_over(
    pallas_crds: LocalCluster, kube_client: AsyncClient, namespace: str, monkeypatch: Any
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(pallas_crds.kubeconfig))
    async with running_operator(pallas_crds, namespace, identity="first") as first:
        second_cm = running_operator(pallas_crds, namespace, identity="second")
        second_task = asyncio.create_task(second_cm.__aenter__())
        await asyncio.sleep(STANDBY_WINDOW)
        assert not second_task.done(), "the second replica must wait for the Lease"
        _setup(pallas_crds, namespace, "research")

        async def created() -> Any:
            return await get_object(kube_client, Deployment, namespace, "research")

        await eventually(created, 30, "the leader reconciling")

        async def counted() -> bool:  # the reconcile is counted when it ends, after its writes
            return total(first.runner.metrics, "pallas_operator_reconcile_total") > 0

        await eventually(counted, 30, "the leader's reconcile counted")
        lease = await kube_client.get(Lease, "pallas-operator", namespace=namespace)
        assert lease.spec is not None
        assert lease.spec.holderIdentity == "first"
    # The first replica stopped and released the Lease: the second one leads now.
    started = time.monotonic()
    second = await asyncio.wait_for(second_task, 30)
    try:
        assert time.monotonic() - started < 10, "a released Lease is taken over at once"
        assert second.runner.leading.is_set()
        kubectl_apply(pallas_crds, agent("helper", in_namespace(namespace)))

        async def handled() -> Any:
            return await get_object(kube_client, Deployment, namespace, "helper")

        await eventually(handled, 30, "the new leader reconciling")
    finally:
        await second_cm.__aexit__(None, None, None)


async def test_probes_and_metrics_are_served(
    pallas_crds: LocalCluster, kube_client: AsyncClient, namespace: str, monkeypatch: Any
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(pallas_crds.kubeconfig))
    async with running_operator(pallas_crds, namespace, http_port=0, http_host="127.0.0.1") as running:
        _setup(pallas_crds, namespace, "research")
        base = f"http://127.0.0.1:{running.runner.http.port}"
        async with httpx2.AsyncClient(base_url=base, timeout=5) as http:
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/readyz")).status_code == 200

            async def scraped() -> Any:
                text = (await http.get("/metrics")).text
                wanted = 'pallas_operator_resources{kind="PallasAgent",phase="Progressing"} 1.0'
                return text if wanted in text else None

            text = await eventually(scraped, 30, "the agent counted by phase")
            assert 'pallas_operator_reconcile_total{kind="agent",outcome="ok"}' in text
            assert 'pallas_operator_reconcile_duration_seconds_count{kind="agent"}' in text
            assert (await http.get("/nope")).status_code == 404


async def test_pallas_operator_command_runs_and_stops_gracefully_on_sigterm(
    pallas_crds: LocalCluster, kube_client: AsyncClient, namespace: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "KUBECONFIG": str(pallas_crds.kubeconfig),
        "PALLAS_RUNTIME_IMAGE": "example/pallas:1",
    }
    pallas = os.path.join(os.path.dirname(sys.executable), "pallas")
    args = ["operator", "--namespace", namespace, "--http-port", "0", "--lease-namespace", namespace]
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(pallas, *args, env=env, stdout=out, stderr=out)
    try:
        port = await asyncio.to_thread(
            logged_port, log, r"probes and metrics on http://[^:]+:(\d+)", 30, lambda: proc.returncode
        )
        async with httpx2.AsyncClient(timeout=2) as http:

            async def ready() -> bool:
                try:
                    return (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
                except httpx2.TransportError:
                    return False

            await eventually(ready, 30, "/readyz answering 200")
        _setup(pallas_crds, namespace, "research")

        async def created() -> Any:
            return await get_object(kube_client, Deployment, namespace, "research")

        dep = await eventually(created, 30, "the agent's Deployment")
        assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "example/pallas:1"
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
        assert proc.returncode == 0, log.read_text()[-4000:]
        lease = await kube_client.get(Lease, "pallas-operator", namespace=namespace)
        assert lease.spec is not None
        assert lease.spec.holderIdentity is None, "the Lease is released on the way out"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
