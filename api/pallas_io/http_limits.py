"""uvicorn's httptools protocol with bounded request heads: size, header count and time.

uvicorn on httptools reads a request head of any size for as long as the client likes: httptools
(llhttp) has no limit, uvicorn sets none and starts no timer before a connection's first
response. Two connections each sending a 32 MiB header took an agent from 167 to 297 MB, and
half-open connections stayed open for good, all before any authentication. uvicorn's h11
protocol bounds the head (16 KiB) but answers 400, has no header count or head timer either,
and costs more per request than httptools, the agent's fast path (docs/runtime.md).

This subclass keeps httptools and adds, per connection (`HttpLimits`):

- the bytes that arrive while a head is incomplete are counted as they come: past the limit the
  request is refused at once (431, or 414 when the request line alone is over), so a
  head is never held beyond the limit plus one read, whatever its shape;
- a head that arrives whole is checked when it ends: a header field count past the limit is a
  431, and so is the exact size of a head that came in one read larger than the limit;
- a clock runs from a connection's start, and from a keep-alive connection's first byte of its
  next request, until the head is complete: 408 when it runs out (a connection that sent
  nothing is just closed);
- idle keep-alive is `keepAliveSeconds` (uvicorn's own timer).

A stopping server (`serving.serve`) calls `stop_keeping_alive`: from then on every response ends
its connection, the responses in progress too (a standing notification stream whose head went
out long before), so no connection of a stopping server goes back to a client's pool to be
closed later, under a request the client may be sending on it right then.

Nothing of a refused request reaches the app. After the answer the connection reads and drops
what the client still sends for at most `LINGER_SECONDS`, then closes: closing with unread
bytes would make the kernel reset the connection, and a client still writing its huge header
would often lose the answer that says why.

The checks are made where they cost least (`bench/listener_bench.py`): a few comparisons per
read and per head, and one timer per connection, re-armed lazily, instead of one per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from pallas_api.fields import HttpLimits

LINGER_SECONDS = 1.0
"""How long a refused connection keeps reading (and dropping) what its client still sends."""
HEADER_OVERHEAD = 4
"""`: ` and CRLF around each header field, counted with its name and value."""
REQUEST_LINE_OVERHEAD = 16
"""The method, `HTTP/1.1`, spaces and CRLF around a request target, about."""

log = logging.getLogger("pallas.http")

Refused = Callable[[str], None]
"""Told the reason of each refusal (`head_too_large`, `too_many_headers`, `uri_too_long`,
`head_timeout`), e.g. to count it."""


@dataclass(frozen=True, slots=True)
class Listener:
    """What every connection of one listener shares."""

    limits: HttpLimits
    refused: Refused | None = None


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol refusing request heads over `limits` before the app sees them.

    uvicorn builds one per connection from the class; `bounded_protocol` makes a class per
    listener, whose `listener` holds its limits.
    """

    listener: ClassVar[Listener]
    stopping: ClassVar[bool] = False
    """The listener's server is stopping: every response ends its connection (`stop_keeping_alive`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = self.listener.limits
        # uvicorn's keep-alive timer, with our value (uvicorn.Config would take whole seconds).
        self.timeout_keep_alive = self.limits.keep_alive_seconds  # type: ignore[assignment]
        self._awaiting_head = True
        """Whether bytes arriving now belong to a request head (none of it parsed yet whole)."""
        self._head_received = 0
        """Bytes received while awaiting the current head (at most one read more than its size)."""
        self._head_started: float | None = None
        """When the current head's clock started; None while no head is awaited or begun."""
        self._clock: asyncio.TimerHandle | None = None
        self._refusal: tuple[int, str, str] | None = None
        """(status, reason for metrics, text for the client) once the current request is refused."""
        self._lingering = False

    # --- connection events -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the clock for the first head as the connection opens."""
        super().connection_made(transport)
        self._head_started = self.loop.time()
        self._arm_clock(self.limits.head_timeout_seconds)

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the clock with the connection."""
        if self._clock is not None:
            self._clock.cancel()
            self._clock = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Count head bytes, parse, and refuse a head that went over a limit."""
        if self._lingering:
            return  # answered: what still comes is dropped, never parsed or kept
        if self._awaiting_head:
            self._head_received += len(data)
            if self._head_started is None:
                self._head_started = self.loop.time()
                if self._clock is None:
                    self._arm_clock(self.limits.head_timeout_seconds)
        super().data_received(data)
        if self._refusal is None and self._awaiting_head and self._head_received > self.limits.max_head_bytes:
            self._refusal = self._oversized()
        if self._refusal is not None:
            self._refuse()

    # --- parser callbacks ------------------------------------------------------------------------

    def on_headers_complete(self) -> None:
        """The head is whole: stop its clock; check it; start the request unless refused."""
        self._awaiting_head = False
        self._head_started = None
        if self._refusal is None:
            if len(self.headers) > self.limits.max_headers:
                self._refusal = (
                    431,
                    "too_many_headers",
                    f"more than {self.limits.max_headers} header fields",
                )
            elif (
                self._head_received > self.limits.max_head_bytes
                and self._head_size() > self.limits.max_head_bytes
            ):
                # The head came in one read with more after it: only now is its size known.
                self._refusal = self._oversized()
        if self._refusal is None:
            super().on_headers_complete()
            if self.stopping:
                self.cycle.keep_alive = False

    def on_body(self, body: bytes) -> None:
        """Body bytes go to the request, unless it was refused (then it has none)."""
        if self._refusal is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        """The request is whole: bytes from now on belong to the next head."""
        if self._refusal is not None:
            return
        super().on_message_complete()
        self._awaiting_head = True
        self._head_received = 0

    # --- stopping ------------------------------------------------------------------------------

    @classmethod
    def stop_keeping_alive(cls, connections: Iterable[object]) -> None:
        """Make every response from now on the last of its connection, those in progress too.

        uvicorn does the same once it stops listening (`HttpToolsProtocol.shutdown`), but closes
        the idle connections then: a server that drains first would leave the connections whose
        response ended during the drain (a notification stream its session's end closed) idle in
        the client's pool until that close, and a request the client sends on one right then is
        lost ("Server disconnected without sending a response"). Closed as its response ends, a
        connection is known to be gone before the client could pick it again.
        """
        cls.stopping = True
        for connection in connections:
            cycle = getattr(connection, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                cycle.keep_alive = False

    # --- limits ----------------------------------------------------------------------------------

    def _head_size(self) -> int:
        return len(self.url) + sum(len(n) + len(v) + HEADER_OVERHEAD for n, v in self.headers)

    def _oversized(self) -> tuple[int, str, str]:
        limit = self.limits.max_head_bytes
        # Both are set when a request begins (uvicorn's on_message_begin), and a client may
        # send only line breaks before one.
        url: bytes = getattr(self, "url", b"")
        headers = self.headers or []
        if len(url) + REQUEST_LINE_OVERHEAD > limit:
            return 414, "uri_too_long", f"request line over {limit} bytes"
        if len(headers) > self.limits.max_headers:
            return 431, "too_many_headers", f"more than {self.limits.max_headers} header fields"
        return 431, "head_too_large", f"request head over {limit} bytes"

    def _arm_clock(self, seconds: float) -> None:
        self._clock = self.loop.call_later(seconds, self._clock_ran_out)

    def _clock_ran_out(self) -> None:
        """The head clock: a head still incomplete after the timeout is refused.

        One timer per connection: a head that completed meanwhile leaves it idle until the next
        head begins (re-armed then); a head that began later gets the rest of its own time.
        """
        self._clock = None
        if self._head_started is None or self._lingering or self.transport.is_closing():
            return
        left = self._head_started + self.limits.head_timeout_seconds - self.loop.time()
        if left > 0:
            self._arm_clock(left)
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # Bytes of a next request arrived while this one is still answered (an SSE stream
            # can last minutes): its head is timed from the end of that answer on.
            self._head_started = self.loop.time()
            self._arm_clock(self.limits.head_timeout_seconds)
            return
        if not self._head_received:
            self.transport.close()  # connected and silent: there is nothing to answer
            return
        timeout = self.limits.head_timeout_seconds
        self._refusal = (408, "head_timeout", f"request head not complete within {timeout:g}s")
        self._refuse()

    def _refuse(self) -> None:
        """Answer the refusal, then drop what the client still sends and close."""
        assert self._refusal is not None
        status, reason, text = self._refusal
        if self.transport.is_closing() or self._lingering:
            return
        self._lingering = True
        self._head_started = None
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        log.info("refused a request from %s with %d: %s", client, status, text)
        if self.listener.refused is not None:
            self.listener.refused(reason)
        body = text.encode("ascii")
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: text/plain; charset=utf-8\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)


def bounded_protocol(limits: HttpLimits, refused: Refused | None = None) -> type[BoundedHttpToolsProtocol]:
    """The protocol class uvicorn builds each connection of one listener from (`Config(http=…)`)."""
    return type(
        "BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"listener": Listener(limits, refused)}
    )
