"""Oversized, slow and silent requests against the registry of a real `pallas run` process.

The registry listens with the same bounded heads as the agents, with the limits of the
deployment's `spec.http`; `pallas run` hosts it and the agents in one process, so that process's
memory is what the attacks could grow.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import yaml

from tests.integration.security.raw_http import (
    MiB,
    RssWatch,
    closed_within,
    head,
    send,
    silent_connections,
)
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.local_manifests import fake_llm_deployment
from tests.support.mcp_peers import free_ports

HEAD_TIMEOUT = 1.0
RSS_BOUND = 24 * MiB


def manifests(llm: FakeOpenAI, http: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *fake_llm_deployment(llm, "local", "sk-registry-test", http=http),
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": "worker"},
            "spec": {"deployment": "local", "instruction": "work"},
        },
    ]


@contextlib.asynccontextmanager
async def pallas_run(path: Path, base: int) -> AsyncIterator[subprocess.Popen[bytes]]:
    """`pallas run -f path` until its registry lists the agent; stopped when the block ends."""
    env = {**os.environ, "PALLAS_LOG_LEVEL": "WARNING", "FASTMCP_CHECK_FOR_UPDATES": "off"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pallas_runtime.cli", "run", "-f", str(path), "--base-port", str(base)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        async with httpx2.AsyncClient() as http:
            for _ in range(400):
                assert proc.poll() is None, "pallas run exited"
                with contextlib.suppress(httpx2.HTTPError):
                    if (await catalogue(http, base)).get("servers"):
                        break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the registry of pallas run never listed the agent")
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def catalogue(http: httpx2.AsyncClient, port: int) -> dict[str, Any]:
    response = await http.get(f"http://127.0.0.1:{port}/.well-known/mcp/server.json")
    return dict(response.json()) if response.status_code == 200 else {}


async def test_the_registry_refuses_oversized_and_slow_heads_and_serves_meanwhile(
    tmp_path: Path,
) -> None:
    async with FakeOpenAI(default=Text("ok")) as llm:
        path = tmp_path / "agents.yaml"
        path.write_text(yaml.safe_dump_all(manifests(llm, {"headTimeoutSeconds": HEAD_TIMEOUT})))
        base = free_ports(2)
        async with pallas_run(path, base) as proc, httpx2.AsyncClient() as http:
            watch = RssWatch(proc.pid)
            huge = head("/v0.1/servers", "X-Big: " + "a" * (32 * MiB))
            async with watch.watching(), silent_connections(base, 100) as silent:
                big, big_too, many, target, slow, listed, *closed = await asyncio.gather(
                    send(base, huge),
                    send(base, huge),
                    send(base, head("/v0.1/servers", *(f"X-{i}: v" for i in range(150)))),
                    send(base, head("/v0.1/servers?search=" + "s" * (20 * 1024))),
                    send(base, head("/v0.1/servers", "X-Slow: s", end=False)),
                    catalogue(http, base),
                    *(closed_within(reader, HEAD_TIMEOUT + 4) for reader in silent),
                )
            print(watch.report("pallas run (registry and agent) under the same attacks"))
    assert (big.status, big_too.status, many.status, target.status) == (431, 431, 431, 414)
    assert slow.status == 408
    assert [entry["server"]["name"].rsplit("/", 1)[1] for entry in listed["servers"]] == ["worker"]
    assert all(seconds is not None and seconds < HEAD_TIMEOUT + 2 for seconds in closed)
    assert watch.peak_growth < RSS_BOUND, watch.report("pallas run")
