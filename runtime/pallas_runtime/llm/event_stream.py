"""Amazon's binary event-stream framing (`application/vnd.amazon.eventstream`), read and written.

Bedrock's `invoke-with-response-stream` answers in it: each message is a 12-byte prelude (total
length, headers length, the prelude's CRC32, big-endian), headers (name length, name, value type,
value), the payload and the message's CRC32. The anthropic SDK's Bedrock stream reads it with
botocore (`EventStreamBuffer`); this reads the same frames without it, for both Bedrock
adapters (botocore is loaded only to sign `type: bedrock` requests). Only string headers
(type 7) are read by name; other header types are skipped by their size.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

PRELUDE = struct.Struct(">III")
STRING = 7
# Sizes of the fixed-size header value types (0/1: true/false carry no bytes).
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}


class EventStreamError(ValueError):
    """Bytes that are not a well-formed event stream (a bad length or checksum)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One event-stream message: its string headers and payload."""

    headers: dict[str, str]
    payload: bytes


def _headers(raw: bytes) -> dict[str, str]:
    headers: dict[str, str] = {}
    at = 0
    while at < len(raw):
        size = raw[at]
        name = raw[at + 1 : at + 1 + size].decode()
        kind = raw[at + 1 + size]
        at += 2 + size
        if kind in (6, STRING):  # bytes or string: a 2-byte length, then the value
            (length,) = struct.unpack_from(">H", raw, at)
            if kind == STRING:
                headers[name] = raw[at + 2 : at + 2 + length].decode()
            at += 2 + length
        elif kind in _FIXED:
            at += _FIXED[kind]
        else:
            raise EventStreamError(f"unknown header value type {kind}")
    return headers


class FrameReader:
    """Frames from bytes as they arrive, in any pieces."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[Frame]:
        """The frames `data` completes (none while a frame is still partial).

        Raises:
            EventStreamError: a checksum or length does not match.
        """
        self._buffer += data
        frames = []
        while len(self._buffer) >= PRELUDE.size:
            total, header_size, prelude_crc = PRELUDE.unpack_from(self._buffer)
            if zlib.crc32(self._buffer[:8]) != prelude_crc or total < PRELUDE.size + header_size + 4:
                raise EventStreamError("an event-stream prelude does not match its checksum")
            if len(self._buffer) < total:
                break
            message, self._buffer = self._buffer[:total], self._buffer[total:]
            (message_crc,) = struct.unpack_from(">I", message, total - 4)
            if zlib.crc32(message[:-4]) != message_crc:
                raise EventStreamError("an event-stream message does not match its checksum")
            start = PRELUDE.size
            frames.append(
                Frame(
                    _headers(message[start : start + header_size]), message[start + header_size : total - 4]
                )
            )
        return frames


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers (what a Bedrock stream's frames are)."""
    raw_headers = b""
    for name, value in headers.items():
        key, text = name.encode(), value.encode()
        raw_headers += bytes([len(key)]) + key + bytes([STRING]) + struct.pack(">H", len(text)) + text
    total = PRELUDE.size + len(raw_headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(raw_headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + raw_headers + payload
    return message + struct.pack(">I", zlib.crc32(message))
