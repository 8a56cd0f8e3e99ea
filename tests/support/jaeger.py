"""A real trace backend for tests: Jaeger v2 (OTLP/HTTP in, the query API out, traces in memory).

hack/build/jaeger.sh builds it (pinned, once) into a cache outside the repo; `jaeger` starts it on
free loopback ports for a test module and stops it afterwards:

    def test_x(jaeger):                      # Jaeger(otlp_url=http://127.0.0.1:P, query_url=...)
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_url}
        trace = await jaeger.wait_for_trace("pallas-run", lambda t: ...)

A trace comes back as the query API has it (`/api/traces/<id>`): `spans` (each with
`operationName`, `spanID`, `references`, `tags` as `key`/`value` pairs) and `processes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.mcp_peers import LOOPBACK, free_ports

REPO = Path(__file__).resolve().parents[2]
JAEGER_SCRIPT = REPO / "hack" / "build" / "jaeger.sh"

# Only what the tests use: the OTLP/HTTP receiver, memory storage, the query API, a health check.
CONFIG = """
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: "${env:JAEGER_HOST}:${env:JAEGER_QUERY_PORT}"
    grpc:
      endpoint: "${env:JAEGER_HOST}:${env:JAEGER_QUERY_GRPC_PORT}"
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: "${env:JAEGER_HOST}:${env:JAEGER_HEALTH_PORT}"
receivers:
  otlp:
    protocols:
      http:
        endpoint: "${env:JAEGER_HOST}:${env:JAEGER_OTLP_PORT}"
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def tags(span: dict[str, Any]) -> dict[str, Any]:
    """A span's tags (attributes) as a dict."""
    return {t["key"]: t["value"] for t in span.get("tags", [])}


def parent_of(span: dict[str, Any]) -> str | None:
    """The span id of a span's parent (its CHILD_OF reference), None for a root."""
    for ref in span.get("references", []):
        if ref.get("refType") == "CHILD_OF":
            return str(ref["spanID"])
    return None


@dataclass(frozen=True)
class Jaeger:
    """A running Jaeger: where to send spans and where to read traces."""

    otlp_url: str
    """The OTLP/HTTP base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`; spans go to `/v1/traces`)."""
    query_url: str

    async def traces(self, service: str) -> list[dict[str, Any]]:
        """Every trace with a span of `service` (the query API's `/api/traces`)."""
        async with httpx2.AsyncClient(timeout=10) as http:
            answer = await http.get(f"{self.query_url}/api/traces", params={"service": service, "limit": 100})
        if answer.status_code == 404:
            return []  # the service has sent nothing yet
        answer.raise_for_status()
        return list(answer.json()["data"] or [])

    async def wait_for_trace(
        self, service: str, done: Callable[[dict[str, Any]], bool], within: float = 30
    ) -> dict[str, Any]:
        """The first trace of `service` that `done` accepts, polling while spans arrive in batches."""
        deadline = time.monotonic() + within
        seen: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            seen = await self.traces(service)
            for trace in seen:
                if done(trace):
                    return trace
            await asyncio.sleep(0.2)
        names = [sorted(s["operationName"] for s in t["spans"]) for t in seen]
        raise AssertionError(f"no trace of {service} as expected within {within}s; traces: {names}")


def install_jaeger() -> Path:
    """Run hack/build/jaeger.sh (instant when the cache is complete); the path of the binary."""
    res = subprocess.run([str(JAEGER_SCRIPT)], capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"hack/build/jaeger.sh failed ({res.returncode}): {last}")
    return Path(res.stdout.strip().splitlines()[-1]) / "jaeger"


@contextlib.contextmanager
def run_jaeger(host: str = LOOPBACK) -> Iterator[Jaeger]:
    """Jaeger on four free ports of `host` (loopback; the node's bridge address for pods) until
    the block ends (its process group killed)."""
    binary = install_jaeger()
    base = free_ports(4, host)
    ports = {
        "JAEGER_OTLP_PORT": base,
        "JAEGER_QUERY_PORT": base + 1,
        "JAEGER_QUERY_GRPC_PORT": base + 2,
        "JAEGER_HEALTH_PORT": base + 3,
    }
    with tempfile.TemporaryDirectory(prefix="pallas-jaeger-") as tmp:
        config = Path(tmp) / "jaeger.yaml"
        config.write_text(CONFIG)
        log = (Path(tmp) / "jaeger.log").open("w")
        proc = subprocess.Popen(
            [str(binary), "--config", f"file:{config}"],
            env={**os.environ, "JAEGER_HOST": host, **{k: str(v) for k, v in ports.items()}},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            health = f"http://{host}:{ports['JAEGER_HEALTH_PORT']}/status"
            for _ in range(300):
                if proc.poll() is not None:
                    raise RuntimeError(f"jaeger exited with {proc.returncode}: {config.with_suffix('.log')}")
                with contextlib.suppress(httpx2.HTTPError):
                    if httpx2.get(health, timeout=1).status_code == 200:
                        break
                time.sleep(0.1)
            else:
                raise RuntimeError("jaeger did not become healthy within 30 s")
            yield Jaeger(
                otlp_url=f"http://{host}:{ports['JAEGER_OTLP_PORT']}",
                query_url=f"http://{host}:{ports['JAEGER_QUERY_PORT']}",
            )
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            log.close()


@pytest.fixture(scope="module")
def jaeger() -> Iterator[Jaeger]:
    """A Jaeger of its own for the test module."""
    with run_jaeger() as running:
        yield running
