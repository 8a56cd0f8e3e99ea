"""Reading a completion stream's events with less work than the SDKs' generic SSE decoders.

The SDKs still send the request (their retries, timeouts, headers, error statuses) and hand the
open response to the stream class they are given; these subclasses of their stream classes read
it: each `data:` line is one JSON event, `data: [DONE]` ends an OpenAI stream, an `event: error`
(Anthropic) or an `{"error": …}` event (OpenAI) raises the SDK's status error.

What a stream costs is per event (a model sends one per token), so the reading is lean: the
body's bytes are split into lines here (not through httpx's text and line decoders), the JSON is
decoded by pydantic-core (a third of `json.loads`'s time), a plain body is read from the
transport's stream without httpx's decoding generators, and the events of one network read go
out as one batch, so the generators between the socket and the adapter step once per read, not
once per event (`bench/streaming_bench.py`; docs/runtime.md, Performance).

The stream classes are in `openai_sse` and `anthropic_sse`: each agent imports only its own
provider's SDK (the anthropic SDK alone is about 2 s of an OpenAI agent's start otherwise).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic_core import from_json

Event = tuple[str, Any]
"""(event name, decoded data) of one event; the name is '' where the stream names none."""


def _body(response: Any) -> AsyncIterator[bytes]:
    """The body's bytes as they arrive; straight from the transport's stream when not encoded.

    httpx's `aiter_bytes` adds two generators (its decoders and chunkers, idle on a plain body)
    between the transport and the reader, stepped once per network read: about 1.3 µs per event
    of a token stream on the 2026-11-29 machine (docs/runtime.md, "What streaming costs").
    """
    if response.headers.get("content-encoding", "identity") != "identity" or response.is_stream_consumed:
        return response.aiter_bytes()  # type: ignore[no-any-return]
    response.is_stream_consumed = True
    return response.stream.__aiter__()  # type: ignore[no-any-return]


async def event_batches(response: Any) -> AsyncIterator[list[Event]]:
    """The events with data of each network read, in order; a stream's end closes the response.

    Raises:
        ValueError: An event's data is not JSON.
    """
    name = ""
    rest = b""
    try:
        async for chunk in _body(response):
            lines = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
            rest = lines.pop()  # the unfinished line (b"" when the read ended on a line break)
            batch: list[Event] = []
            for line in lines:
                if not line:  # the blank line after each event (half the lines), LF-terminated
                    name = ""
                elif line.startswith(b"data:"):
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        if batch:
                            yield batch
                        return
                    batch.append((name, from_json(data)))
                elif line.startswith(b"event:"):
                    name = line[6:].strip().decode()
                elif not line.strip():
                    name = ""
            if batch:
                yield batch
    finally:
        await response.aclose()
