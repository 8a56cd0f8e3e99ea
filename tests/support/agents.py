"""Run a real Pallas agent for a test: in this event loop, or as a `pallas agent` process.

Two async context managers, both serving on a free 127.0.0.1 port and both cleaning up fully
when the block ends (server stopped, sockets closed, process group gone, temp files removed):

- `serve_agent(config)`: `build_server(config)` wrapped by `agent_app` (the exact app
  `pallas agent` serves: /mcp, /healthz, /readyz, /metrics) under uvicorn in the current event
  loop. Fast (no new process) and the test can read the agent's `RuntimeMetrics` directly.
  Everything that talks to it must not block the loop: use async clients and
  `asyncio.create_subprocess_exec` for external tools, never `subprocess.run`.
- `run_agent_process(config)`: the `pallas agent --config FILE --port N --host 127.0.0.1` CLI as
  a subprocess, with the config written to a temporary file; it returns once `/readyz` answers
  200. Use it to test the command itself (start-up, exit codes, signals).

Both yield a running-agent object whose `url` is the MCP endpoint (`http://127.0.0.1:PORT/mcp`)
and `base_url` the root for the probe routes:

    async with serve_agent(config) as agent:
        async with Client(agent.url, mode="legacy") as client: ...
        async with httpx2.AsyncClient() as http:
            metrics_text = (await http.get(agent.base_url + "/metrics")).text

    async with run_agent_process(config, env={"OPENAI_API_KEY": "k"}) as proc:
        ...  # proc.url, proc.pid, proc.stderr() (the agent's JSON log lines so far)

`agent_config(llm_base_url, ...)` builds a small valid config (camelCase fields, as in files);
`pallas_argv()` is the argv prefix that runs the `pallas` program of this virtualenv.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import uvicorn

from pallas_api.config import AgentConfig, parse_config, render_config
from pallas_runtime.conversations.model import ConversationStore
from pallas_runtime.downstream.source import ToolSource
from pallas_runtime.llm.provider import LLMProvider
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server import AgentServer, agent_app, build_server
from tests.support.ports import logged_port

LOOPBACK = "127.0.0.1"
# fastmcp must never phone home from a test (its update check calls PyPI).
QUIET_FASTMCP_ENV = {"FASTMCP_CHECK_FOR_UPDATES": "off", "FASTMCP_SHOW_SERVER_BANNER": "false"}


def agent_config(
    llm_base_url: str,
    *,
    name: str = "pallas-test",
    model: str = "fake-model",
    provider_type: str = "openai",
    **fields: Any,
) -> AgentConfig:
    """A valid agent config pointing at a (fake) LLM; `fields` are extra top-level file fields
    in camelCase, e.g. `servers=[{"name": "echo", "url": url}]`, `capabilities={"vision": True}`."""
    return parse_config(
        {
            "name": name,
            "model": model,
            "provider": {
                "name": "fake",
                "type": provider_type,
                "baseURL": llm_base_url,
                "maxRetries": 0,
                "timeoutSeconds": 10,
            },
            **fields,
        },
        "agent_config()",
    )


def pallas_argv() -> list[str]:
    """The argv prefix of this virtualenv's `pallas` program (its console script when installed)."""
    script = Path(sys.executable).with_name("pallas")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pallas_runtime.cli"]


# --- in-process ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServedAgent:
    """An agent served by `serve_agent` in this event loop."""

    url: str
    """The MCP endpoint, `http://127.0.0.1:PORT/mcp`."""
    base_url: str
    """`http://127.0.0.1:PORT`, for /healthz, /readyz and /metrics."""
    port: int
    config: AgentConfig
    server: AgentServer
    metrics: RuntimeMetrics
    """The agent's own registry (also what its /metrics route exposes)."""


class _InLoopServer(uvicorn.Server):
    # The agent shares the test's loop and thread: leave SIGINT/SIGTERM to pytest.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_agent(
    config: AgentConfig,
    *,
    metrics: RuntimeMetrics | None = None,
    provider: LLMProvider | None = None,
    sources: Sequence[ToolSource] | None = None,
    environ: Mapping[str, str] | None = None,
    store: ConversationStore | None = None,
    allowed_hosts: Sequence[str] = (),
    startup_timeout: float = 10.0,
) -> AsyncIterator[ServedAgent]:
    """Serve `build_server(config, ...)` through `agent_app` on a free 127.0.0.1 port.

    The keyword arguments go to `build_server` (`environ` defaults to `{}` so the host's API
    keys never leak into a test) and `agent_app` (`allowed_hosts`). On entry the server is
    listening and its lifespan has run, so /readyz already answers 200. On exit uvicorn stops
    (clients still holding a stream are cut after one second), the lifespan closes the LLM
    provider and the downstream connections, and the serving task is awaited.

    Raises:
        RuntimeError: uvicorn stopped, or did not listen within `startup_timeout` seconds.
    """
    metrics = metrics if metrics is not None else RuntimeMetrics()
    server = build_server(
        config,
        metrics=metrics,
        provider=provider,
        sources=sources,
        environ={} if environ is None else environ,
        store=store,
    )
    uv_config = uvicorn.Config(
        agent_app(server, allowed_hosts),
        host=LOOPBACK,
        port=0,  # the kernel picks a free port; read back below (no bind/close/rebind race)
        lifespan="on",
        log_config=None,
        log_level="warning",
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=1,
    )
    uv_server = _InLoopServer(uv_config)
    task = asyncio.create_task(uv_server.serve(), name=f"agent {config.name}")
    try:
        deadline = time.monotonic() + startup_timeout
        while not uv_server.started:
            if task.done():
                # uvicorn calls sys.exit() when the lifespan or the bind fails.
                exc = task.exception() if not task.cancelled() else None
                raise RuntimeError(f"agent {config.name}: uvicorn stopped while starting: {exc!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent {config.name}: not listening within {startup_timeout:g}s")
            await asyncio.sleep(0.005)
        port = int(uv_server.servers[0].sockets[0].getsockname()[1])
        base = f"http://{LOOPBACK}:{port}"
        yield ServedAgent(f"{base}/mcp", base, port, config, server, metrics)
    finally:
        uv_server.should_exit = True
        # A failed start ends in uvicorn's sys.exit(); it was reported above, not here.
        with contextlib.suppress(Exception, SystemExit):
            await task


# --- subprocess ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentProcess:
    """A `pallas agent` process started by `run_agent_process`."""

    url: str
    """The MCP endpoint, `http://127.0.0.1:PORT/mcp`."""
    base_url: str
    port: int
    pid: int
    config_path: Path
    stderr_path: Path
    started_in: float
    """Seconds from spawning the process to the first 200 from /readyz."""

    def stderr(self) -> str:
        """What the agent logged so far (JSON lines on stderr; stdout is merged in too)."""
        return self.stderr_path.read_text(errors="replace")


async def _terminate(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the agent's process group, SIGKILL it after `grace` seconds; only while it runs."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


@contextlib.asynccontextmanager
async def run_agent_process(
    config: AgentConfig | str | Path,
    *,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    ready_timeout: float = 60.0,
    stop_grace: float = 10.0,
) -> AsyncIterator[AgentProcess]:
    """Start `pallas agent --config FILE --port N --host 127.0.0.1` and wait for /readyz 200.

    Args:
        config: An AgentConfig (rendered to YAML in a temp dir, as the operator's ConfigMap
            would hold it) or the path of an existing config file.
        port: The port to serve on; by default the agent binds port 0 and logs the one it got.
        env: Extra environment (e.g. the API key variable); added to this process's
            environment with fastmcp's network calls turned off.
        extra_args: More `pallas agent` arguments (e.g. `["--allowed-host", "x"]`).
        ready_timeout: Seconds to wait for /readyz; the process is killed after that. A minute:
            an agent that says it serves can still take 20 s to answer on a machine running four
            test lanes beside a cluster (seen in CI).
        stop_grace: Seconds between SIGTERM and SIGKILL when the block ends.

    Raises:
        RuntimeError: The process exited (its code and log tail are in the message) or was not
            ready in time.
    """
    with tempfile.TemporaryDirectory(prefix="pallas-agent-") as tmp:
        if isinstance(config, AgentConfig):
            config_path = Path(tmp) / "agent.yaml"
            config_path.write_text(render_config(config))
        else:
            config_path = Path(config)
        stderr_path = Path(tmp) / "agent.log"
        argv = [
            *pallas_argv(),
            *("agent", "--config", str(config_path), "--port", str(port or 0), "--host", LOOPBACK),
            *extra_args,
        ]
        with stderr_path.open("wb") as log_file:
            started = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env={**os.environ, **QUIET_FASTMCP_ENV, **(env or {})},
                start_new_session=True,  # its own process group, so cleanup reaches all of it
            )
        try:
            if not port:
                port = await asyncio.to_thread(
                    logged_port, stderr_path, r"serving on http://[^/]+:(\d+)/mcp", ready_timeout,
                    lambda: proc.returncode,
                )  # fmt: skip
            base = f"http://{LOOPBACK}:{port}"
            elapsed = await _wait_ready(proc, base, stderr_path, started, ready_timeout)
            yield AgentProcess(f"{base}/mcp", base, port, proc.pid, config_path, stderr_path, elapsed)
        finally:
            await _terminate(proc, stop_grace)


def _tail(path: Path, size: int = 800) -> str:
    return path.read_text(errors="replace")[-size:]


async def _wait_ready(
    proc: asyncio.subprocess.Process, base: str, stderr_path: Path, started: float, time_limit: float
) -> float:
    # Each probe may take 5 s: on a loaded machine a 1 s one timed out again and again.
    async with httpx2.AsyncClient(timeout=5.0) as http:
        while True:
            if proc.returncode is not None:
                tail = _tail(stderr_path)
                raise RuntimeError(f"pallas agent exited with {proc.returncode} before ready: {tail}")
            with contextlib.suppress(httpx2.TransportError):
                if (await http.get(f"{base}/readyz")).status_code == 200:
                    return time.monotonic() - started
            if time.monotonic() - started > time_limit:
                raise RuntimeError(
                    f"pallas agent not ready on {base} within {time_limit:g}s: {_tail(stderr_path)}"
                )
            await asyncio.sleep(0.02)
