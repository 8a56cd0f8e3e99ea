"""Reading a completion stream's events (`llm.sse.event_batches`) from an httpx2 response.

A plain body is read straight from the transport's stream (two generator steps fewer per network
read than httpx's `aiter_bytes`); an encoded one still goes through httpx's decoders. Either way
the events come out whole, in order, one batch per read, and the response ends up closed.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator

import httpx2
import pytest

from pallas_runtime.llm.sse import event_batches

EVENTS = [{"n": n, "text": f" word{n}"} for n in range(5)]
WIRE = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in EVENTS) + b"data: [DONE]\n\n"


class Reads(httpx2.AsyncByteStream):
    """A body arriving in the given reads; remembers whether it was closed."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for read in self.reads:
            yield read

    async def aclose(self) -> None:
        self.closed = True


def response(reads: list[bytes], **headers: str) -> httpx2.Response:
    return httpx2.Response(
        200,
        headers={"content-type": "text/event-stream", **headers},
        stream=Reads(reads),
        request=httpx2.Request("POST", "http://llm.invalid/v1/chat/completions"),
    )


async def batches(answer: httpx2.Response) -> list[list[object]]:
    return [[data for _, data in batch] async for batch in event_batches(answer)]


async def test_a_plain_body_split_anywhere_gives_every_event_once_in_order_and_is_closed() -> None:
    cut = [WIRE[:7], WIRE[7:40], WIRE[40:41], WIRE[41:]]  # inside "data:", inside JSON, …
    answer = response(cut)
    got = await batches(answer)
    assert [e for batch in got for e in batch] == EVENTS
    assert len(got) <= len(cut)
    assert answer.is_closed
    assert isinstance(answer.stream, Reads)
    assert answer.stream.closed


async def test_an_encoded_body_is_decoded_first() -> None:
    packed = gzip.compress(WIRE)
    answer = response([packed[:20], packed[20:]], **{"content-encoding": "gzip"})
    got = await batches(answer)
    assert [e for batch in got for e in batch] == EVENTS
    assert answer.is_closed


async def test_a_body_already_read_is_refused_as_httpx_refuses_it() -> None:
    answer = response([WIRE])
    await batches(answer)
    with pytest.raises(httpx2.StreamConsumed):
        await batches(answer)
