"""Raw HTTP/1.1 over a socket, for requests no HTTP client library would send, and RSS readings.

- `send(port, data)`: write `data` (in chunks, optionally slowly) while reading the answer, as
  an attacker's client does; the server may answer and close long before `data` is all sent.
- `silent_connections(port, n)`: connections that never send a byte, and when each was closed.
- `RssWatch(pid)`: samples a process's resident memory (`/proc/<pid>/status` VmRSS) meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"
KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class Answer:
    """What the server said (None: it closed without a word) and after how many seconds."""

    status: int | None
    body: bytes
    seconds: float


def head(target: str = "/healthz", *fields: str, method: str = "GET", end: bool = True) -> bytes:
    """A request head with `Host` and `fields`; without `end`, the empty line is left out."""
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", *fields]
    return ("\r\n".join(lines) + "\r\n" + ("\r\n" if end else "")).encode()


async def send(
    port: int,
    data: bytes,
    *,
    chunk: int = 64 * KiB,
    pause: float = 0.0,
    within: float = 20.0,
) -> Answer:
    """Send `data` in `chunk`-byte writes (`pause` seconds apart) and read the answer meanwhile.

    The answer is what the server sent within `within` seconds (then the test fails on it).
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    # The first bytes go out in this step, not in a task the loop may start a second later: on a
    # loaded machine the server's head clock saw such a connection as silent (closed unanswered).
    writer.write(data[:chunk])

    async def write() -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()
            for start in range(chunk, len(data), chunk):
                if pause:
                    await asyncio.sleep(pause)
                writer.write(data[start : start + chunk])
                await writer.drain()

    sender = asyncio.create_task(write())
    try:
        try:
            answer = await asyncio.wait_for(_read_answer(reader), within)
        except ConnectionError:
            answer = b""
        seconds = loop.time() - started
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
    return Answer(int(match[1]) if match else None, answer.partition(b"\r\n\r\n")[2], seconds)


async def _read_answer(reader: asyncio.StreamReader) -> bytes:
    """The first read of the answer, and the rest of its body when its head declares a length.

    The head and the body of an answer often come in separate reads.
    """
    answer = await reader.read(64 * KiB)
    head, _, body = answer.partition(b"\r\n\r\n")
    declared = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    if declared is None:
        return answer
    with contextlib.suppress(ConnectionError):
        while len(body) < int(declared[1]) and (more := await reader.read(64 * KiB)):
            body += more
    return head + b"\r\n\r\n" + body


async def closed_within(reader: asyncio.StreamReader, within: float) -> float | None:
    """Seconds until the server closed the connection (EOF or reset); None if not `within`."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        while await asyncio.wait_for(reader.read(4096), within - (loop.time() - started)):
            pass
    except TimeoutError:
        return None
    except ConnectionError:
        pass
    return loop.time() - started


@contextlib.asynccontextmanager
async def silent_connections(port: int, count: int) -> AsyncIterator[list[asyncio.StreamReader]]:
    """`count` connections that send nothing; closed when the block ends."""
    pairs = [await asyncio.open_connection(LOOPBACK, port) for _ in range(count)]
    try:
        yield [reader for reader, _ in pairs]
    finally:
        for _, writer in pairs:
            writer.close()


def rss_bytes(pid: int) -> int:
    """The process's resident set size now (VmRSS)."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert match, f"no VmRSS for process {pid}"
    return int(match[1]) * KiB


@dataclass
class RssWatch:
    """Samples a process's VmRSS every `interval` seconds while its block runs."""

    pid: int
    interval: float = 0.02
    before: int = 0
    samples: list[int] = field(default_factory=list)

    @property
    def peak_growth(self) -> int:
        """The highest reading above the one taken before the block, in bytes."""
        return max(self.samples, default=self.before) - self.before

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[RssWatch]:
        """Sample in the background until the block ends (and once more after it)."""
        self.before = rss_bytes(self.pid)

        async def sample() -> None:
            while True:
                self.samples.append(rss_bytes(self.pid))
                await asyncio.sleep(self.interval)

        sampler = asyncio.create_task(sample())
        try:
            yield self
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            self.samples.append(rss_bytes(self.pid))

    def report(self, what: str) -> str:
        """One line with the figures, for the test's output and its failure messages."""
        return (
            f"{what}: RSS {self.before / MiB:.0f} MiB before, peak {max(self.samples) / MiB:.0f} MiB "
            f"(+{self.peak_growth / MiB:.1f} MiB), {self.samples[-1] / MiB:.0f} MiB after"
        )
