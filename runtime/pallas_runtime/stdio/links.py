"""Where a stdio server's stdin and stdout are: a child process, or two FIFOs shared with a container.

A link opens once per life of the server and yields its output (a reader) and its input (a
writer); closing it ends that life. `ChildProcess` is `pallas run`'s: it starts the command in a
process group of its own, relays its stderr into the log line by line under the server's name
(rate-limited: past a burst, a flood of lines is counted, not logged), and stops it as the MCP
spec says (close stdin, wait, SIGTERM, wait, SIGKILL). `FifoPair` is a pod's: the server's
container runs the command with its stdout on `out` and stdin on `in`, and the kubelet restarts
it (with its own back-off) when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pallas_runtime.stdio.lines import MAX_LINE_BYTES

log = logging.getLogger("pallas.stdio")

STDERR_LINE_CHARS = 4096
"""A longer stderr line is cut in the log."""
STDERR_BURST = 200
"""Stderr lines of one server logged at once; past them, `STDERR_LINES_PER_SECOND`."""
STDERR_LINES_PER_SECOND = 20.0
"""Stderr lines of one server logged per second past the burst (at most ~80 KiB/s of log); the
others are dropped and counted: 300,000 lines of a noisy server made 84 MB of log."""
STDERR_REPORT_SECONDS = 10.0
"""How often a server's dropped stderr lines are counted in the log (and once when it ends)."""
EXIT_GRACE = 2.0
"""Seconds a server has to exit after its stdin closes, then again after SIGTERM (the SDK's)."""
STDERR_DRAIN = 1.0
"""How long a stopped server's last stderr lines are waited for."""
FIFO_POLL = 0.1
"""How often a FIFO link looks for the server's container having opened its end."""
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM")
"""What a child process inherits of `pallas run`'s environment: what programs need to start, and
nothing else (the provider keys and Secret values of the run stay with the run)."""

PR_SET_DUMPABLE = 4
"""prctl(2): whether the process may be dumped, and whether its /proc files are its user's."""

FIFO_IN = "in"
FIFO_OUT = "out"


@dataclass
class Pipes:
    """One life of a server: its output, its input, and how that life ended (once it has)."""

    output: asyncio.StreamReader
    input: asyncio.StreamWriter
    ended_how: str = ""


class Link(Protocol):
    """Opens a stdio server's input and output."""

    paced: bool
    """Whether the bridge waits between two lives (False when something else paces restarts)."""

    def open(self) -> contextlib.AbstractAsyncContextManager[Pipes]:
        """One life of the server: started (or waited for) on entry, stopped on exit.

        Raises:
            OSError: the server cannot be started or reached.
        """


def hide_from_children() -> None:
    """Make this process non-dumpable, so a child running as the same user cannot read it.

    A child gets only `child_environment`, but as the same user it could read ours whole (the
    run's provider keys and Secret values) from `/proc/<our pid>/environ`, and our memory from
    `/proc/<our pid>/mem`. A non-dumpable process's `/proc` files are root's, and reading them
    needs `CAP_SYS_PTRACE` (so also no core dumps and no same-user debugger). The children
    themselves are dumpable again: `execve` resets the flag. Linux only; idempotent.
    """
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:  # pragma: no cover - only without prctl
        log.warning("could not hide this process from its children: %s", os.strerror(ctypes.get_errno()))


def child_environment(env: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A child's environment: the few variables it needs from ours, then its own (`stdio.env`)."""
    ours = os.environ if environ is None else environ
    return {**{k: ours[k] for k in INHERITED_ENV if k in ours}, **env}


class ChildProcess:
    """A stdio server run as a child process of this one (`pallas run`)."""

    paced = True

    def __init__(
        self,
        name: str,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
    ) -> None:
        """Describe the child; nothing starts before `open`.

        Args:
            name: The server's name, leading each of its stderr lines in the log.
            command: The program, looked up on the child's `PATH`.
            args: Its arguments.
            env: Its whole environment (see `child_environment`).
            cwd: Its working directory; this process's by default.
        """
        self._name = name
        self._command = command
        self._args = list(args)
        self._env = dict(env)
        self._cwd = cwd

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Pipes]:
        """Start the command; stop it (if it still runs) when the block ends."""
        hide_from_children()
        process = await asyncio.create_subprocess_exec(
            self._command,
            *self._args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,  # its own process group: a stop reaches what it started
            limit=MAX_LINE_BYTES,
        )
        if process.stdout is None or process.stdin is None or process.stderr is None:  # pragma: no cover
            raise OSError("the child was started without pipes")
        log.info(
            "%s: started %s (pid %d)", self._name, self._command, process.pid, extra={"server": self._name}
        )
        relay = asyncio.create_task(self._relay(process.stderr), name=f"stderr-{self._name}")
        pipes = Pipes(process.stdout, process.stdin)
        try:
            yield pipes
        finally:
            await asyncio.shield(_stop(process))
            pipes.ended_how = _exit_status(process.returncode)
            # Its last words (a crash's message) are in the pipe still; a descendant that keeps
            # the pipe open must not hold the bridge up.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(relay), STDERR_DRAIN)
            relay.cancel()
            await asyncio.gather(relay, return_exceptions=True)

    async def _relay(self, stderr: asyncio.StreamReader) -> None:
        """Each stderr line of the server into the log, led by its name, within the line budget.

        The pipe is read to its end whatever is logged, so the server never blocks writing.
        """
        budget = _LineBudget(STDERR_LINES_PER_SECOND, STDERR_BURST)
        dropped = 0
        reported = time.monotonic()
        try:
            while True:
                try:
                    line = await stderr.readuntil(b"\n")
                except asyncio.IncompleteReadError as end:
                    line = end.partial
                except asyncio.LimitOverrunError as over:
                    line = await stderr.read(over.consumed)
                if not line:
                    return
                if not line.strip():
                    continue
                if not budget.take():
                    dropped += 1
                    if time.monotonic() - reported >= STDERR_REPORT_SECONDS:
                        self._report_dropped(dropped)
                        dropped, reported = 0, time.monotonic()
                    continue
                text = line.decode(errors="replace").rstrip()
                if len(text) > STDERR_LINE_CHARS:
                    text = text[:STDERR_LINE_CHARS] + " …[cut]"
                log.info("%s: %s", self._name, text, extra={"server": self._name, "stream": "stderr"})
        finally:  # also when the relay is cancelled after a stop: the count is not lost
            if dropped:
                self._report_dropped(dropped)

    def _report_dropped(self, count: int) -> None:
        log.warning(
            "%s: %d stderr lines dropped (more than %d at once or %g per second)",
            self._name, count, STDERR_BURST, STDERR_LINES_PER_SECOND,
            extra={"server": self._name, "stream": "stderr"},
        )  # fmt: skip


class _LineBudget:
    """A token bucket: `burst` lines at once, refilled at `rate` lines per second."""

    def __init__(self, rate: float, burst: int) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at = time.monotonic()

    def take(self) -> bool:
        """Whether one more line may be logged now (and count it if so)."""
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Close stdin, wait; SIGTERM the group, wait; SIGKILL it (the MCP spec's shutdown)."""
    if process.stdin is not None and not process.stdin.is_closing():
        process.stdin.close()
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
        try:
            await asyncio.wait_for(process.wait(), EXIT_GRACE)
            return
        except TimeoutError:
            continue


def _exit_status(code: int | None) -> str:
    if code is None:
        return "stopped"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class FifoPair:
    """A stdio server in another container of the pod, talking through two FIFOs in a shared volume.

    The server's container runs `exec COMMAND ARGS >DIR/out <DIR/in` (the shell opens `out` first,
    then `in`). The bridge opens `out` for reading without waiting, then waits for the server to
    open `in`: once it has, it has opened `out` too, so the end of `out` means the server ended.
    """

    paced = False  # the kubelet restarts the server's container with its own back-off

    def __init__(self, name: str, directory: Path) -> None:
        """Use the FIFOs `in` and `out` in `directory` (made by `make_fifos`)."""
        self._name = name
        self._in = directory / FIFO_IN
        self._out = directory / FIFO_OUT

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Pipes]:
        """Wait for the server's container to open its ends; close ours when the block ends."""
        loop = asyncio.get_running_loop()
        out_fd = os.open(self._out, os.O_RDONLY | os.O_NONBLOCK)
        try:
            in_fd = await _open_for_writing(self._in)
        except BaseException:
            os.close(out_fd)
            raise
        log.info("%s: its container opened the pipes", self._name, extra={"server": self._name})
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(out_fd, "rb", buffering=0)
        )
        write_transport, write_protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), os.fdopen(in_fd, "wb", buffering=0)
        )
        writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
        pipes = Pipes(reader, writer)
        try:
            yield pipes
        finally:
            pipes.ended_how = "its output ended (the container restarts it)"
            write_transport.close()
            read_transport.close()


async def _open_for_writing(path: Path) -> int:
    """Open a FIFO for writing once a reader has it open (polled: opening would block a thread)."""
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: nobody reads it yet
                raise
        await asyncio.sleep(FIFO_POLL)


def make_fifos(directory: Path) -> None:
    """Make the FIFOs `in` and `out` in `directory`; existing ones are kept.

    They are writable by any user: the server's image chooses its own.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for name in (FIFO_IN, FIFO_OUT):
        path = directory / name
        if not path.exists():
            os.mkfifo(path)
        path.chmod(0o666)
