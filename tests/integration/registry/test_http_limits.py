"""Over-long and odd requests through the real HTTP server (uvicorn): 4xx, never a 500."""

from __future__ import annotations

import asyncio

import httpx2
import pytest

from pallas_registry import MemorySource
from tests.support.registry import running_registry, state


async def raw_request(base: str, target: bytes) -> tuple[int, bytes]:
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET " + target + b" HTTP/1.1\r\nHost: registry\r\nConnection: close\r\n\r\n")
    await writer.drain()
    response = await reader.read()
    writer.close()
    status = int(response.split(b" ", 2)[1])
    return status, response


TOO_LONG_FOR_THE_APP = (
    b'{"error":"query string longer than 4096 bytes","code":"INVALID_ARGUMENTS","category":"request"}'
)
TOO_LONG_FOR_THE_LISTENER = b"request line over 16384 bytes"
"""A request line over the listener's head limit never reaches the app (docs/api.md §3)."""


@pytest.mark.parametrize(
    ("query_bytes", "answer"),
    [(5_000, TOO_LONG_FOR_THE_APP), (15_000, TOO_LONG_FOR_THE_APP), (70_000, TOO_LONG_FOR_THE_LISTENER)],
)
async def test_huge_query_strings(query_bytes: int, answer: bytes) -> None:
    async with running_registry(MemorySource([state()])) as base:
        status, body = await raw_request(base, b"/v0.1/servers?search=" + b"x" * query_bytes)
    assert status == 414
    assert answer in body


@pytest.mark.parametrize(
    "target",
    [
        b"/v0.1/servers/%ZZ/versions/latest",
        b"/v0.1/servers/a%2F%2E%2E/versions/latest",
        b"/v0.1/servers?cursor=%00%01",
        b"/v0.1/servers?limit=%FF",
        b"/.well-known/mcp/server.json?capability=%E2%80%AE",
        b"/v0.1/servers/a%2Fb/versions/%FF",
        b"//v0.1//servers",
    ],
)
async def test_odd_targets_are_client_errors(target: bytes) -> None:
    async with running_registry(MemorySource([state()])) as base:
        status, response = await raw_request(base, target)
    assert 400 <= status < 500
    assert b"content-type: application/json" in response.lower()


async def test_targets_that_are_not_http_are_refused_by_the_server() -> None:
    # Raw non-ASCII bytes in the request line break HTTP/1.1 itself: httptools answers 400 before the app.
    async with running_registry(MemorySource([state()])) as base:
        status, _ = await raw_request(base, "/v0.1/servers/ä%2Fb/versions/latest".encode())
    assert status == 400


async def test_a_real_client_round_trip() -> None:
    async with running_registry(MemorySource([state()])) as base, httpx2.AsyncClient() as http:
        response = await http.get(base + "/.well-known/mcp/server.json")
        assert response.status_code == 200
        assert response.json()["servers"][0]["server"]["name"] == "local.cluster.svc.agents/research"
        assert (await http.get(base + "/readyz")).status_code == 200
