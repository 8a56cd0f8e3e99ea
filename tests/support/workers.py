"""What the tests of one run share when pytest-xdist spreads them over several worker processes.

- `run_dir()`: a folder of this run, the same for the controller and every worker (the
  controller makes it in `pytest_configure`, before the workers start, and they inherit its
  environment variable).
- `run_lock(name)`: a lock across the run's processes, for set-up that two workers must not do at
  once (starting the local cluster).
- `worker()`: this process's index and the number of workers, (0, 1) without xdist, so a worker
  can take its own share of a resource (a slice of the port range).

Which tests run on one worker, one after another, is decided in tests/conftest.py (xdist groups).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

RUN_DIR = "PALLAS_TEST_RUN_DIR"


def run_dir() -> Path:
    """The run's shared folder, made on first use: by the controller in `pytest_configure`, or by
    a plain pytest (or a process not given one) when it first asks; idempotent."""
    existing = os.environ.get(RUN_DIR)
    if existing and Path(existing).is_dir():
        return Path(existing)
    path = Path(tempfile.mkdtemp(prefix="pallas-tests-"))
    os.environ[RUN_DIR] = str(path)
    return path


def finish_run() -> None:
    """Remove the run's shared folder (the controller's job, after every worker has ended)."""
    path = os.environ.pop(RUN_DIR, None)
    if path:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def run_lock(name: str) -> Iterator[None]:
    """Hold the run-wide lock `name` (an flock on a file in the run's folder) for the block."""
    with (run_dir() / f"{name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def worker() -> tuple[int, int]:
    """(index, count) of this xdist worker; (0, 1) in a run without workers."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    return index, max(count, 1)
