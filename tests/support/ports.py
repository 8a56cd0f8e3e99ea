"""Ports for tests: assigned by the OS and read back, guessed only where a process cannot take 0.

- A server we start in-process binds port 0 itself (`mcp_servers.bound_socket`).
- A process we spawn gets `--port 0` and says in its log which port it bound (`logged_port`).
- A URL where nothing may answer uses `closed_port()`: a socket bound for the whole block but
  never listening, so connecting is refused and no one else can take the port meanwhile.
- Only a process that must be told a concrete port before it starts gets a guessed one
  (`mcp_peers.free_port(s)`): `pallas run --base-port` (a block; port 0 is refused by design),
  PostgreSQL (`-p` takes 1-65535), and the etcd, API server and node ports of `hack/local/cluster`.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections until the block ends (bound, not listening)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        yield int(sock.getsockname()[1])


def logged_port(log: Path, pattern: str, timeout: float = 30.0, alive: object = None) -> int:
    """The port a spawned process logged (JSON lines or text), matched by `pattern`'s group 1.

    `alive`, when given, is polled (a Popen's `poll`) so a process that died is reported at once.
    """
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                line = str(json.loads(line).get("message", line))
            match = regex.search(line)
            if match:
                return int(match[1])
        if alive is not None and callable(alive) and alive() is not None:
            raise AssertionError(f"the process exited before logging its port:\n{text[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no port logged within {timeout:g}s:\n{text[-2000:]}")
        time.sleep(0.05)
