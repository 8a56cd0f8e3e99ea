"""Pieces of the product and of the local node run for real: a shell, a child interpreter, a
listening server. Their pure neighbours are tested in tests/unit (operator/test_stdio_builders.py,
operator/test_runtime_pieces.py, server/test_a2a_pieces.py, test_localnode.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx2
import pytest

from localnode import NodeError, network
from pallas_operator.builders.stdio import EXPORT_SECRETS
from pallas_operator.probe_server import ProbeEndpoints
from tests.support.node_settings import DEFAULTS


def test_the_shell_line_exports_each_secret_file_exactly(tmp_path: Path) -> None:
    """Run the server container's shell prefix for real: values exact, a missing file unset."""
    secrets = tmp_path / "secrets"
    data = secrets / "..data"
    data.mkdir(parents=True)
    (data / "TOKEN").write_bytes(b"s3cret with spaces $HOME `x`\n\n")
    (secrets / "TOKEN").symlink_to("..data/TOKEN")  # as the kubelet lays a Secret volume out
    (secrets / "EMPTY").write_text("")
    probe = 'printf "%s|" "$TOKEN" "${EMPTY-unset}" "${ABSENT-unset}"'
    shell = EXPORT_SECRETS.format(secrets=secrets) + probe
    done = subprocess.run(
        ["/bin/sh", "-c", shell], capture_output=True, check=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert done.stdout == b"s3cret with spaces $HOME `x`\n\n||unset|"


async def test_probe_server_answers_probes_and_metrics() -> None:
    ready = False
    server = ProbeEndpoints(lambda: b"pallas_operator_reconcile_total 1\n", lambda: ready)
    await server.start("127.0.0.1", 0)
    try:
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/readyz")).status_code == 503
            ready = True
            assert (await http.get("/readyz")).status_code == 200
            assert (await http.get("/metrics")).text == "pallas_operator_reconcile_total 1\n"
            assert (await http.post("/metrics")).status_code == 405
    finally:
        await server.stop()


def _state(folder: Path, pid: int, exe: str) -> Path:
    folder.mkdir()
    (folder / "state.json").write_text(json.dumps({"processes": [{"name": "etcd", "pid": pid, "exe": exe}]}))
    return folder


def test_the_node_lock_refuses_a_running_node_and_outlives_a_dead_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine restart leaves the lock and the other cluster's state.json; neither is a node."""
    lock = tmp_path / "pallas-node.json"
    monkeypatch.setattr(network, "LOCK", lock)
    mine = tmp_path / "mine"
    with subprocess.Popen(["/bin/sleep", "30"]) as sleeper:
        try:
            # Popen returns once forked, maybe before the child runs sleep: wait until it does.
            cmdline = Path(f"/proc/{sleeper.pid}/cmdline")
            deadline = time.monotonic() + 10
            while not cmdline.read_bytes().startswith(b"/bin/sleep") and time.monotonic() < deadline:
                time.sleep(0.01)
            running = _state(tmp_path / "running", sleeper.pid, "/bin/sleep")
            lock.write_text(json.dumps({"state_dir": str(running), "bridge": "pallas0"}))
            with pytest.raises(
                NodeError, match=f"another local node runs on this machine \\(state in {running}\\)"
            ):
                network.take_lock(DEFAULTS, mine)
        finally:
            sleeper.kill()
    sleeper.wait()
    dead = _state(tmp_path / "dead", sleeper.pid, "/bin/sleep")
    recycled = _state(tmp_path / "recycled", os.getpid(), "/usr/local/bin/etcd")  # a pid now running pytest
    for stale in (dead, recycled):
        lock.write_text(json.dumps({"state_dir": str(stale), "bridge": "pallas0"}))
        network.take_lock(DEFAULTS, mine)
        assert json.loads(lock.read_text())["state_dir"] == str(mine)
