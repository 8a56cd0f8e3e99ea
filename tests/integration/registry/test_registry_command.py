"""`pallas registry` as the registry pod runs it: a process against the real control plane."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import httpx2
import pytest
from lightkube import AsyncClient

from tests.support.cluster import LocalCluster
from tests.support.mcp_servers import bound_socket
from tests.support.registry import assert_valid_catalogue, create_agent, create_deployment, ready_status

pytestmark = pytest.mark.usefixtures("pallas_crds")


async def wait_ready(http: httpx2.AsyncClient, base: str, process: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.returncode is not None:
            pytest.fail(f"pallas registry exited early with {process.returncode}")
        try:
            if (await http.get(base + "/readyz", timeout=1)).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        await asyncio.sleep(0.1)
    pytest.fail("pallas registry never became ready")


async def test_pallas_registry_serves_the_catalogue_and_stops_on_sigterm(
    kube_cluster: LocalCluster, kube_client: AsyncClient, namespace: str
) -> None:
    await create_deployment(kube_client, namespace)
    await create_agent(kube_client, namespace, "research", ready_status("research", namespace))
    sock = bound_socket()
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "KUBECONFIG": str(kube_cluster.kubeconfig), "PALLAS_DEPLOYMENT": "ouranos"}
    argv = ["registry", "--namespace", namespace, "--host", "127.0.0.1", "--port", str(port)]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pallas_runtime.cli", *argv, env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        base = f"http://127.0.0.1:{port}"
        async with httpx2.AsyncClient() as http:
            await wait_ready(http, base, process)
            document = (await http.get(base + "/.well-known/mcp/server.json")).json()
        assert_valid_catalogue(document)
        assert [e["server"]["name"] for e in document["servers"]] == [
            f"local.cluster.svc.{namespace}/research"
        ]
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 10)
        assert process.returncode == 0, stderr
        assert b"registry: serving ouranos agents of namespace" in stderr
    finally:
        if process.returncode is None:
            process.kill()
            await process.communicate()
