"""The unit tier's rule, enforced: a unit test starts no process and opens no network socket.

Such a test belongs in tests/integration, where the tiers' parallel lanes and timeouts are made
for it. A unit test that tries fails at once, naming what it tried; `make check` runs this tier
on every core with a short per-test timeout (the Makefile's UNIT_TIMEOUT), so a slow one fails
loudly too. Socket pairs (the event loop's wake-up pipe) and Unix sockets stay allowed: they
leave no process and reach no network.
"""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import pytest

NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class TierViolation(AssertionError):
    """A unit test reached for a process or the network."""


def _refuse(what: str) -> TierViolation:
    return TierViolation(f"a unit test may not {what}: move the test to tests/integration")


@pytest.fixture(autouse=True)
def _no_processes_or_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_process(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        raise _refuse(f"start a process ({args!r})")

    def guarded(name: str) -> Any:
        original = getattr(socket.socket, name)

        def check(self: socket.socket, address: Any, *rest: Any) -> Any:
            if self.family in NETWORK_FAMILIES:
                raise _refuse(f"{name} a network socket ({address!r})")
            return original(self, address, *rest)

        return check

    monkeypatch.setattr(subprocess.Popen, "_execute_child", no_process)
    for name in ("bind", "connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, guarded(name))
