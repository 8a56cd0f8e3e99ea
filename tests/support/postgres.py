"""A throw-away PostgreSQL server on loopback for the conversation-store tests.

Debian's `postgresql` package (installed by hack/build/system-deps.sh) gives `initdb` and `postgres`;
the fixture makes a cluster in a temporary directory with password (SCRAM) authentication,
starts it on 127.0.0.1 and a free port, and removes it at the end. PostgreSQL refuses to run as
root, so as root the server runs as the `postgres` user the package creates. `stop()` and
`start()` let a test take the database away and bring it back. For pods of the local node,
`running_postgres(host=<the node's bridge address>, clients=<the pod range>)` listens there too
and admits password logins from that range (never a wildcard address).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.mcp_peers import LOOPBACK, free_port

USER, PASSWORD, DATABASE = "pallas", "s3cret-Passw0rd-for-tests", "pallas"


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        pytest.fail(f"PostgreSQL's {name} is not installed: run hack/build/system-deps.sh", pytrace=False)
    return found[-1]


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@dataclass
class Postgres:
    """A running (or stopped) throw-away server."""

    data: Path
    port: int
    log: Path
    settings: Mapping[str, str] = field(default_factory=dict)
    """More server settings (`-c name=value`), e.g. `{"max_connections": "16"}`."""
    host: str = LOOPBACK
    """Where clients reach it: loopback, or the local node's bridge address for pods (it then
    listens on both)."""

    @property
    def dsn(self) -> str:
        """The superuser's DSN."""
        return self.dsn_of(USER, PASSWORD)

    def dsn_of(self, user: str, password: str) -> str:
        """The DSN of another role (see `create_role`)."""
        return f"postgresql://{user}:{password}@{self.host}:{self.port}/{DATABASE}"

    def start(self) -> None:
        listen = ",".join(dict.fromkeys([LOOPBACK, self.host]))
        options = f"-c listen_addresses={listen} -p {self.port} -k {self.data} -c fsync=off"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        subprocess.run(
            _as_postgres([
                _bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                "-o", options, "start",
            ]),
            check=True, capture_output=True, timeout=90,
        )  # fmt: skip
        self._wait_accepting()

    def create_role(self, user: str, password: str) -> None:
        """A login role that is no superuser and owns the database (so it may create the tables)."""
        script = f"CREATE ROLE {user} LOGIN PASSWORD '{password}'; ALTER DATABASE {DATABASE} OWNER TO {user};"
        subprocess.run(
            [_bin("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, "-d", DATABASE,
             "-v", "ON_ERROR_STOP=1", "-c", script],
            check=True, capture_output=True, timeout=30, env={**os.environ, "PGPASSWORD": PASSWORD},
        )  # fmt: skip

    def stop(self) -> None:
        subprocess.run(
            _as_postgres([_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]),
            check=False, capture_output=True, timeout=60,
        )  # fmt: skip

    def _wait_accepting(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.1)
        raise AssertionError(f"PostgreSQL did not accept connections:\n{self.log.read_text()[-2000:]}")


@contextlib.contextmanager
def running_postgres(
    settings: Mapping[str, str] | None = None, *, host: str = LOOPBACK, clients: str | None = None
) -> Iterator[Postgres]:
    """A new cluster with one database and one password superuser, until the block ends.

    `host` is an address to listen on beside loopback (the node's bridge address), `clients` a
    range (CIDR) whose password logins it admits there (the node's pods).
    """
    tmp = Path(tempfile.mkdtemp(prefix="pallas-pg-"))
    data, pwfile, log = tmp / "data", tmp / "pw", tmp / "pg.log"
    pwfile.write_text(PASSWORD)
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres", "postgres")
        shutil.chown(pwfile, "postgres", "postgres")
    try:
        subprocess.run(
            _as_postgres([
                _bin("initdb"), "-D", str(data), "-U", USER, "--pwfile", str(pwfile),
                "-A", "scram-sha-256", "-E", "UTF8", "--no-sync",
            ]),
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        if clients is not None:
            with (data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {clients} scram-sha-256\n")
        server = Postgres(data, free_port(), log, dict(settings or {}), host)
        server.start()
        subprocess.run(
            [_bin("createdb"), "-h", "127.0.0.1", "-p", str(server.port), "-U", USER, DATABASE],
            check=True, capture_output=True, timeout=30, env={**os.environ, "PGPASSWORD": PASSWORD},
        )  # fmt: skip
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One server for the session; tests use databases or ids of their own within it."""
    with running_postgres() as server:
        yield server
