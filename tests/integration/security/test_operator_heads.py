"""Oversized, slow and silent requests against the operator's probe and metrics endpoints.

The operator serves kubelet's probes and Prometheus with aiohttp, which bounds each line and the
number of fields but neither a head as a whole nor the time it takes; its endpoints read every
head through the same limits as the agents (the chart's `metrics.limits`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx2

from pallas_api.fields import HttpLimits
from pallas_operator.probe_server import ProbeEndpoints
from tests.integration.security.raw_http import MiB, closed_within, head, send, silent_connections

LIMITS = HttpLimits(head_timeout_seconds=1, keep_alive_seconds=1)


@contextlib.asynccontextmanager
async def endpoints() -> AsyncIterator[int]:
    server = ProbeEndpoints(lambda: b"pallas_operator_reconcile_total 1\n", lambda: True, LIMITS)
    await server.start("127.0.0.1", 0)
    try:
        yield server.port
    finally:
        await server.stop()


async def test_oversized_heads_bodies_and_slow_heads_are_refused() -> None:
    async with endpoints() as port:
        big, many, target, body, slow, fine = await asyncio.gather(
            send(port, head("/metrics", "X-Big: " + "a" * (8 * MiB))),
            send(port, head("/metrics", *(f"X-{i}: v" for i in range(101)))),
            send(port, head("/metrics?" + "q" * (20 * 1024))),
            send(port, head("/metrics", "Content-Length: 10", method="POST") + b"0123456789"),
            send(port, head("/readyz", "X-Slow: s", end=False)),
            send(port, head("/metrics", "X-Pad: " + "p" * (15 * 1024))),
        )
    assert (big.status, many.status, target.status) == (431, 431, 414)
    assert big.body == b"request head over 16384 bytes"
    assert body.status == 413
    assert slow.status == 408
    assert 1 <= slow.seconds < 2.5
    assert fine.status == 200
    assert fine.body == b"pallas_operator_reconcile_total 1\n"


async def test_silent_and_idle_connections_are_closed_and_clients_are_served() -> None:
    async with endpoints() as port, silent_connections(port, 100) as silent:
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            # One keep-alive connection, two requests, as Prometheus scrapes.
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/metrics")).text == "pallas_operator_reconcile_total 1\n"
        closed = await asyncio.gather(*(closed_within(reader, 4) for reader in silent))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head("/healthz"))
        assert (await reader.readuntil(b"ok\n")).startswith(b"HTTP/1.1 200")
        idle = await closed_within(reader, 4)
        writer.close()
    assert all(seconds is not None and seconds < 2.5 for seconds in closed)
    assert idle is not None
    assert idle < 2.5
