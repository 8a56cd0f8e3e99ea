"""MCP's stdio framing over a pair of byte streams: one JSON-RPC message per line.

The MCP SDK frames stdio only for the pipes of a child process it starts itself
(`mcp.client.stdio.stdio_client`) or for this process's own stdin and stdout
(`mcp.server.stdio.stdio_server`, which reads through worker threads). A bridge reads the pipes of
a child it supervises itself (for its exit status and its stderr) or FIFOs shared with another
container, so the framing is done here over asyncio streams; parsing and serialising are the
SDK's, as in its own transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

log = logging.getLogger("pallas.stdio")

MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest message read from a server (a tool result as large as `maxResultBytes` allows,
JSON-escaped); a longer line ends the server's session."""


@dataclass
class Framed:
    """A link's messages: what the session reads and writes, and whether the server went quiet."""

    read: MemoryObjectReceiveStream[SessionMessage | Exception]
    write: MemoryObjectSendStream[SessionMessage]
    ended: anyio.Event
    """Set when the server's output ended (it exited, or closed its stdout) or could not be read."""
    why: str = "its output ended"


@contextlib.asynccontextmanager
async def framed(
    label: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> AsyncIterator[Framed]:
    """The messages of one link until the block ends; `ended` tells when the server stopped talking."""
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    link = Framed(read, write, anyio.Event())

    async def receive() -> None:
        async with to_session:
            while True:
                try:
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as end:
                    line = end.partial
                    if not line.strip():
                        break
                except asyncio.LimitOverrunError:
                    link.why = f"it wrote a message longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB"
                    break
                except (ConnectionError, OSError) as exc:
                    link.why = f"reading its output failed ({type(exc).__name__})"
                    break
                if not line.strip():
                    continue
                try:
                    message: SessionMessage | Exception = SessionMessage(
                        mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    )
                except ValueError as exc:
                    log.warning("%s: a line of its output is not JSON-RPC; skipped", label)
                    message = exc
                try:
                    await to_session.send(message)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    break
        link.ended.set()

    async def send() -> None:
        async with from_session:
            async for message in from_session:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    writer.write(data.encode() + b"\n")
                    await writer.drain()
                except (ConnectionError, OSError) as exc:
                    link.why = f"writing to its input failed ({type(exc).__name__})"
                    link.ended.set()
                    return

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(receive)
        tasks.start_soon(send)
        try:
            yield link
        finally:
            tasks.cancel_scope.cancel()
