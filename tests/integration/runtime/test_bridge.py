"""`pallas bridge` and its FIFO link: what a hosted stdio server's pod runs, without a cluster.

The pod's two containers are played by two processes: `pallas bridge --fifos DIR` and the shell
line the operator gives the server's container (`exec COMMAND ARGS >DIR/out <DIR/in`), run with
server-everything; the test plays the kubelet, starting the server's "container" again when it
ends. The bridge is reached over HTTP as an agent reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_api import names
from pallas_operator.builders.stdio import EXPORT_SECRETS, SERVER_SHELL
from tests.support.mcp_peers import McpPeers
from tests.support.ports import logged_port
from tests.support.waiting import until

PALLAS = [sys.executable, "-m", "pallas_runtime.cli"]
SERVING = r"bridge serving on http://[0-9.]+:([0-9]+)/mcp"
TOKEN = "the-deployments-bridge-credential"


def credential(tmp_path: Path) -> list[str]:
    """`--token-file` of a file holding `TOKEN`, as the pod's bridge-token volume does."""
    path = tmp_path / "bridge-token"
    path.write_text(TOKEN)
    return ["--token-file", str(path)]


def agent_client(port: int) -> Client[StreamableHttpTransport]:
    """A client sending the deployment's credential, as the deployment's agents do."""
    transport = StreamableHttpTransport(
        f"http://127.0.0.1:{port}/mcp", headers={names.BRIDGE_TOKEN_HEADER: TOKEN}
    )
    return Client(transport, mode="legacy")


@contextlib.contextmanager
def process(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def server_container(
    peers: McpPeers, fifos: Path, log: Path, secrets: Path | None = None
) -> subprocess.Popen[bytes]:
    """The server's container: the operator's shell line around server-everything over stdio."""
    env = {"PATH": f"{peers.node_bin_dir}:/usr/bin:/bin", "HOME": str(fifos.parent)}
    shell = SERVER_SHELL.format(fifos=fifos)
    if secrets is not None:
        shell = EXPORT_SECRETS.format(secrets=secrets) + shell
    argv = [
        "/bin/sh",
        "-c",
        shell,
        str(peers.node),
        str(peers.server_everything),
        "stdio",
    ]
    with log.open("ab") as out:
        return subprocess.Popen(argv, stderr=out, stdout=subprocess.DEVNULL, env=env, start_new_session=True)


async def ready(port: int) -> int:
    async with httpx2.AsyncClient() as http:
        with contextlib.suppress(httpx2.HTTPError):
            return (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code
    return 0


async def until_ready(port: int, status: int = 200, within: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while await ready(port) != status:
        assert loop.time() < deadline, f"/readyz never answered {status}"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def kubelet(
    peers: McpPeers, fifos: Path, log: Path, secrets: Path | None = None
) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    """Keep the server's 'container' running: start it again whenever it ends (no back-off here)."""
    lives = [server_container(peers, fifos, log, secrets)]

    async def restart() -> None:
        while True:
            await asyncio.sleep(0.05)
            if lives[-1].poll() is not None:
                lives.append(server_container(peers, fifos, log, secrets))

    task = asyncio.create_task(restart())
    try:
        yield lives
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for life in lives:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(life.pid, signal.SIGKILL)
            life.wait(10)


async def test_the_pod_form_over_fifos_survives_its_server_ending(
    mcp_peers: McpPeers, tmp_path: Path
) -> None:
    fifos = tmp_path / "stdio"
    assert subprocess.run([*PALLAS, "bridge", "--make-fifos", str(fifos)], check=False).returncode == 0
    bridge_log = tmp_path / "bridge.log"
    with process(
        [
            *PALLAS,
            "bridge",
            "--name",
            "everything",
            "--fifos",
            str(fifos),
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            *credential(tmp_path),
        ],
        bridge_log,
    ) as bridge:
        port = logged_port(bridge_log, SERVING, alive=bridge.poll)
        assert await ready(port) == 503  # no server yet: the pod is not Ready
        async with kubelet(mcp_peers, fifos, tmp_path / "server.log") as lives:
            await until_ready(port)
            async with agent_client(port) as client:
                first = await client.call_tool("echo", {"message": "one"})
                os.killpg(lives[0].pid, signal.SIGKILL)  # the server crashes; its container restarts
                await until_ready(port, 503)  # the bridge saw it go
                await until_ready(port)
                second = await client.call_tool("echo", {"message": "two"})
    assert first.content[0].text == "Echo: one"
    assert second.content[0].text == "Echo: two"
    text = bridge_log.read_text()
    assert "everything: connected" in text
    assert "everything: lost (its output ended" in text


def write_secret_volume(directory: Path, version: str, values: dict[str, str]) -> None:
    """Lay out (or update) a Secret volume as the kubelet does: a new version, `..data` swapped."""
    data = directory / f"..{version}"
    data.mkdir(parents=True)
    for name, value in values.items():
        (data / name).write_text(value)
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")
    link = directory / "..data_tmp"
    link.symlink_to(data.name)
    link.rename(directory / "..data")


async def test_a_rotated_secret_reaches_the_pods_server_without_a_new_pod(
    mcp_peers: McpPeers, tmp_path: Path
) -> None:
    """The server's shell exports the volume's files; the bridge restarts the server on a change."""
    fifos, secrets = tmp_path / "stdio", tmp_path / "secrets"
    assert subprocess.run([*PALLAS, "bridge", "--make-fifos", str(fifos)], check=False).returncode == 0
    # VERSION is too short to count as a secret (`MIN_SECRET_LENGTH`): it shows which values the
    # server has, while the token itself is scrubbed from the results by the bridge.
    write_secret_volume(secrets, "v1", {"API_TOKEN": "first-token", "VERSION": "v1"})
    bridge_log = tmp_path / "bridge.log"
    argv = [*PALLAS, "bridge", "--name", "everything", "--fifos", str(fifos), "--secrets-dir", str(secrets)]
    argv += credential(tmp_path)
    with process([*argv, "--port", "0", "--host", "127.0.0.1"], bridge_log) as bridge:
        port = logged_port(bridge_log, SERVING, alive=bridge.poll)
        async with kubelet(mcp_peers, fifos, tmp_path / "server.log", secrets) as lives:
            await until_ready(port)
            async with agent_client(port) as client:
                before = (await client.call_tool("get-env", {})).content[0].text
                write_secret_volume(secrets, "v2", {"API_TOKEN": "second-token", "VERSION": "v2"})
                deadline = asyncio.get_running_loop().time() + 30
                while len(lives) < 2:  # the bridge ended the server's life; the "kubelet" restarted it
                    assert asyncio.get_running_loop().time() < deadline, "the server was never restarted"
                    await asyncio.sleep(0.05)
                await until_ready(port)
                after = (await client.call_tool("get-env", {})).content[0].text
    assert '"VERSION": "v1"' in before
    assert '"VERSION": "v2"' in after
    assert '"API_TOKEN": "[redacted]"' in before
    assert '"API_TOKEN": "[redacted]"' in after
    assert "first-token" not in before
    assert "second-token" not in after
    text = bridge_log.read_text()
    assert "secrets changed (API_TOKEN, VERSION); restarting the server" in text
    assert "first-token" not in text
    assert "second-token" not in text


async def test_the_by_hand_form_runs_the_command_as_a_child(mcp_peers: McpPeers, tmp_path: Path) -> None:
    log = tmp_path / "bridge.log"
    env = {
        **os.environ,
        "PALLAS_LOG_FORMAT": "json",
        "PATH": f"{mcp_peers.node_bin_dir}:{os.environ['PATH']}",
        names.BRIDGE_TOKEN_ENV: TOKEN,
    }
    argv = [
        *PALLAS,
        "bridge",
        "--name",
        "everything",
        "--port",
        "0",
        "--host",
        "127.0.0.1",
        "--",
        "node",
        str(mcp_peers.server_everything),
        "stdio",
    ]
    with process(argv, log, env) as bridge:
        port = logged_port(log, SERVING, alive=bridge.poll)
        await until_ready(port)
        async with agent_client(port) as client:
            tools = {t.name for t in await client.list_tools()}
    assert {"echo", "get-tiny-image"} <= tools


def test_bad_usage_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for argv, problem in [
        (["--fifos", str(tmp_path)], "--name is required"),
        (["--name", "x"], "exactly one of --fifos DIR or -- COMMAND"),
        (["--name", "x", "--fifos", str(tmp_path), "--stateful"], "--stateful needs a process per session"),
        (["--name", "x", "--fifos", str(tmp_path)], "give the deployment's bridge credential"),
    ]:
        env = {k: v for k, v in os.environ.items() if k != names.BRIDGE_TOKEN_ENV}
        res = subprocess.run([*PALLAS, "bridge", *argv], capture_output=True, text=True, check=False, env=env)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip() == f"pallas bridge: {problem}" or problem in res.stderr


async def _probe_session(port: int) -> str:
    """Open an MCP session as a health probe does, and leave it without its DELETE (time ran out)."""
    async with httpx2.AsyncClient() as http:
        answer = await http.post(
            f"http://127.0.0.1:{port}/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "probe", "version": "1"},
                },
            },
            headers={
                names.BRIDGE_TOKEN_HEADER: TOKEN,
                "Accept": "application/json, text/event-stream",
            },
        )
    assert answer.status_code == 200, answer.text
    return answer.headers["mcp-session-id"]


async def _session_closed(port: int, session: str) -> bool:
    async with httpx2.AsyncClient() as http:
        answer = await http.post(
            f"http://127.0.0.1:{port}/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
            headers={
                names.BRIDGE_TOKEN_HEADER: TOKEN,
                "Accept": "application/json, text/event-stream",
                "mcp-session-id": session,
                "mcp-protocol-version": "2025-06-18",
            },
        )
    return answer.status_code == 404


def _servers(bridge: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(bridge)], capture_output=True, text=True).stdout
    return {int(pid) for pid in out.split()}


async def test_a_full_stateful_bridge_closes_a_probes_leftover_session_before_a_server(
    mcp_peers: McpPeers, tmp_path: Path
) -> None:
    """A probe's session (no server behind it) goes first, though a serving session is idler."""
    log = tmp_path / "bridge.log"
    env = {**os.environ, "PALLAS_LOG_FORMAT": "json", names.BRIDGE_TOKEN_ENV: TOKEN}
    argv = [
        *PALLAS, "bridge", "--name", "everything", "--stateful", "--max-sessions", "2",
        "--port", "0", "--host", "127.0.0.1",
        "--", str(mcp_peers.node), str(mcp_peers.server_everything), "stdio",
    ]  # fmt: skip
    with process(argv, log, env) as bridge:
        port = logged_port(log, SERVING, alive=bridge.poll)
        await until_ready(port)
        async with agent_client(port) as first:
            await first.call_tool("echo", {"message": "one"})
            first_server = _servers(bridge.pid)
            assert len(first_server) == 1
            probe = await _probe_session(port)
            async with agent_client(port) as second:
                await second.call_tool("echo", {"message": "two"})
                await until("the probe's session closed", lambda: _session_closed(port, probe), 20)
                answer = await first.call_tool("echo", {"message": "again"})
                assert answer.content[0].text == "Echo: again"
                servers = _servers(bridge.pid)
        assert first_server <= servers, log.read_text()[-2000:]  # the first session's server went on
        assert len(servers) == 2
