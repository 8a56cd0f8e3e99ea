"""Registry benchmark on the local control plane: prints figures; not a timed test.

    .venv/bin/python bench/registry_bench.py [--agents 1000] [--requests 500] [--changes 50]

A fresh namespace gets one PallasDeployment and N Ready PallasAgents (status written through the
status subresource, as the operator does). `pallas registry` then runs as its own process, pinned
to CPU 0, watching that namespace; the clients run here, on CPU 1. Measured:

- latency of `GET /.well-known/mcp/server.json` (all N entries) and of 100-item `/v0.1/servers`
  pages (walking every page in turn), over HTTP keep-alive, one request at a time;
- the cost of re-rendering after a change (in process: store update, snapshot, full document),
  which a request pays once per catalogue version;
- the registry process's RSS after the load (VmRSS, and its peak VmHWM);
- status change to catalogue: patch one agent's status subresource, then poll the entry every
  10 ms until the change shows.

Targets (issue 5): P95 ≤ 20 ms (full document) and ≤ 5 ms (100-item page); RSS ≤ 100 MB;
status change to catalogue ≤ 2 s at P95.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pallas_registry.catalogue import CatalogueStore  # noqa: E402
from pallas_registry.query import parse_query, select  # noqa: E402
from pallas_registry.responses import Rendered, server_list  # noqa: E402
from tests.support.registry import create_agent, create_deployment, ready_status, set_status, state  # noqa: E402

HACK_CLUSTER = REPO / "hack" / "local" / "cluster"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def figures(name: str, seconds: list[float], target_ms: float | None = None) -> None:
    ms = [s * 1000 for s in seconds]
    verdict = "" if target_ms is None else ("  ok" if percentile(ms, 95) <= target_ms else "  OVER TARGET")
    print(
        f"{name:<44} n={len(ms):<5} p50={statistics.median(ms):8.2f} ms  p95={percentile(ms, 95):8.2f} ms  "
        f"max={max(ms):8.2f} ms{verdict}"
    )


def cluster_env() -> dict[str, str]:
    up = subprocess.run([str(HACK_CLUSTER), "up"], capture_output=True, text=True)
    if up.returncode != 0:
        raise SystemExit(f"hack/local/cluster up failed: {up.stderr}")
    env: dict[str, str] = json.loads(
        subprocess.run(
            [str(HACK_CLUSTER), "env", "--json"], capture_output=True, text=True, check=True
        ).stdout
    )
    return env


def install_crds(env: dict[str, str]) -> None:
    kubectl = [str(Path(env["bin_dir"]) / "kubectl"), f"--kubeconfig={env['kubeconfig']}"]
    for path in sorted((REPO / "crds").glob("*.yaml")):
        subprocess.run(
            [*kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(path)],
            check=True,
            capture_output=True,
        )
    subprocess.run(
        [*kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
        check=True,
        capture_output=True,
    )


async def populate(client: AsyncClient, namespace: str, count: int) -> float:
    await create_deployment(client, namespace)
    gate = asyncio.Semaphore(32)

    async def one(index: int) -> None:
        name = f"agent-{index:04d}"
        async with gate:
            await create_agent(client, namespace, name, ready_status(name, namespace), capabilities=["bench"])

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.monotonic() - started


async def timed(calls: int, call: Callable[[int], Awaitable[Any]]) -> list[float]:
    samples = []
    for index in range(calls):
        started = time.perf_counter()
        await call(index)
        samples.append(time.perf_counter() - started)
    return samples


class RawClient:
    """A minimal HTTP/1.1 keep-alive client: measures the server and the wire, not a client
    library's parsing (httpx2 spends milliseconds in Python on a 1 MiB body)."""

    def __init__(self, host: str, port: int) -> None:
        self._address = (host, port)

    async def __aenter__(self) -> RawClient:
        self._reader, self._writer = await asyncio.open_connection(*self._address)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._writer.close()

    async def get(self, target: str) -> bytes:
        self._writer.write(f"GET {target} HTTP/1.1\r\nHost: registry\r\n\r\n".encode())
        head = await self._reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"GET {target}: {head.splitlines()[0]!r}")
        length = next(
            int(line.split(b":")[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length")
        )
        return await self._reader.readexactly(length)


async def server_side(http: httpx2.AsyncClient) -> None:
    """Mean handler time per route, from the registry's own histogram."""
    text = (await http.get("/metrics")).text
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        for suffix, into in (("_sum", sums), ("_count", counts)):
            prefix = f'pallas_registry_request_duration_seconds{suffix}{{route="'
            if line.startswith(prefix):
                route = line[len(prefix) :].split('"')[0]
                into[route] = float(line.rsplit(" ", 1)[1])
    for route in ("well_known", "servers"):
        if counts.get(route):
            print(f"  server-side mean, route {route}: {sums[route] / counts[route] * 1000:.3f} ms")


def rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def render_cost(count: int, rounds: int = 30) -> None:
    store = CatalogueStore()
    store.replace(state(f"agent-{i:04d}") for i in range(count))
    store.snapshot()
    full, page = [], []
    for index in range(rounds):
        started = time.perf_counter()
        store.upsert(state("agent-0000", tools=(f"t{index}",)))
        catalogue = store.snapshot()
        Rendered.of(server_list(select(catalogue, parse_query([]))))
        full.append(time.perf_counter() - started)
        started = time.perf_counter()
        Rendered.of(server_list(select(catalogue, parse_query([]))[:100], {"count": 100}))
        page.append(time.perf_counter() - started)
    figures(f"re-render after a change, full ({count})", full)
    figures("re-render after a change, 100-item page", page)


async def wait_for(check: Callable[[], Awaitable[bool]], within: float, what: str, poll: float = 0.1) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {within}s")
        await asyncio.sleep(poll)


async def run(args: argparse.Namespace) -> None:
    env = cluster_env()
    install_crds(env)
    config = KubeConfig.from_file(env["kubeconfig"])
    client = AsyncClient(config=config, field_manager="registry-bench")
    namespace = f"bench-registry-{secrets.token_hex(3)}"
    await client.create(Namespace(metadata=ObjectMeta(name=namespace)))
    process = None
    try:
        took = await populate(client, namespace, args.agents)
        print(f"created {args.agents} Ready PallasAgents in {took:.1f} s")
        port = 24290
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pallas_registry",
                "--namespace",
                namespace,
                "--deployment",
                "ouranos",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env={**os.environ, "KUBECONFIG": env["kubeconfig"]},
            preexec_fn=lambda: os.sched_setaffinity(0, {0}),
            stderr=subprocess.DEVNULL,
        )
        os.sched_setaffinity(0, {1})
        base = f"http://127.0.0.1:{port}"
        async with httpx2.AsyncClient(base_url=base, timeout=10) as http:

            async def full_catalogue() -> bool:
                try:
                    response = await http.get("/.well-known/mcp/server.json")
                except httpx2.TransportError:
                    return False
                return response.status_code == 200 and len(response.json()["servers"]) == args.agents

            started = time.monotonic()
            await wait_for(full_catalogue, 120, "the full catalogue")
            print(f"registry serving all {args.agents} agents {time.monotonic() - started:.1f} s after start")

            size = len((await http.get("/.well-known/mcp/server.json")).content)
            print(f"well-known document: {size / 1024:.0f} KiB")
            cursors: list[str | None] = [None]
            while True:
                page = (await http.get("/v0.1/servers", params={"limit": 100, **_cursor(cursors[-1])})).json()
                if "nextCursor" not in page["metadata"]:
                    break
                cursors.append(page["metadata"]["nextCursor"])
            pages = [
                "/v0.1/servers?" + urllib.parse.urlencode({"limit": 100, **_cursor(cursor)})
                for cursor in cursors
            ]
            async with RawClient("127.0.0.1", port) as raw:
                figures(
                    f"GET well-known, {args.agents} entries",
                    await timed(args.requests, lambda _: raw.get("/.well-known/mcp/server.json")),
                    20,
                )
                figures(
                    f"GET /v0.1/servers?limit=100 ({len(pages)} pages)",
                    await timed(args.requests, lambda i: raw.get(pages[i % len(pages)])),
                    5,
                )
            print("  the same through httpx2 (its parsing of the body included):")
            figures(
                "    well-known",
                await timed(args.requests, lambda _: http.get("/.well-known/mcp/server.json")),
            )
            figures(
                "    100-item page", await timed(args.requests, lambda i: http.get(pages[i % len(pages)]))
            )
            await server_side(http)
            render_cost(args.agents)
            now, peak = rss_mb(process.pid)
            print(
                f"registry RSS {now:.1f} MB (peak {peak:.1f} MB){'  ok' if peak <= 100 else '  OVER TARGET'}"
            )

            delays = []
            for round_ in range(args.changes):
                name = f"agent-{(round_ * 37) % args.agents:04d}"
                marker = f"bench-{round_}"
                path = f"/v0.1/servers/{urllib.parse.quote(f'local.cluster.svc.{namespace}/{name}', safe='')}"
                started = time.monotonic()
                await set_status(client, namespace, name, {"tools": ["send_message", "get_health", marker]})

                async def visible(path: str = path, marker: str = marker) -> bool:
                    entry = (await http.get(path + "/versions/latest")).json()
                    return marker in entry["_meta"]["dev.pallas/agent"]["tools"]

                await wait_for(visible, 30, f"status change {round_}", poll=0.01)
                delays.append(time.monotonic() - started)
            figures("status change → catalogue (real control plane)", delays, 2000)
        await cli_rss(env, namespace, args.agents)
    finally:
        if process is not None:
            process.terminate()
            process.wait(10)
        await client.delete(Namespace, namespace)
        await client.close()


async def cli_rss(env: dict[str, str], namespace: str, agents: int) -> None:
    """RSS of the same registry started as `pallas registry`, as the registry pod runs it (the
    figures above come from `python -m pallas_registry`)."""
    port = 24291
    argv = ["registry", "--namespace", namespace, "--deployment", "ouranos", "--host", "127.0.0.1"]
    process = subprocess.Popen(
        [sys.executable, "-m", "pallas_runtime.cli", *argv, "--port", str(port)],
        env={**os.environ, "KUBECONFIG": env["kubeconfig"]},
        stderr=subprocess.DEVNULL,
    )
    try:
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:

            async def full() -> bool:
                try:
                    response = await http.get("/.well-known/mcp/server.json")
                except httpx2.TransportError:
                    return False
                return response.status_code == 200 and len(response.json()["servers"]) == agents

            await wait_for(full, 120, "the full catalogue from `pallas registry`")
            for _ in range(50):
                await http.get("/.well-known/mcp/server.json")
        now, peak = rss_mb(process.pid)
        print(f"same, started as `pallas registry`: RSS {now:.1f} MB (peak {peak:.1f} MB)")
    finally:
        process.terminate()
        process.wait(10)


def _cursor(cursor: str | None) -> dict[str, str]:
    return {"cursor": cursor} if cursor else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--changes", type=int, default=50)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
