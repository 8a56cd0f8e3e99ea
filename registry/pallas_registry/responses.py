"""JSON bodies, ETags and the per-catalogue-version response cache of the registry app.

A response body depends only on the catalogue version and the parsed query, so it is rendered
once per (version, query) and kept in a small LRU cache; its ETag is a hash of the bytes, so an
unchanged document keeps its ETag across catalogue versions and `If-None-Match` gets a 304.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from cachetools import LRUCache
from starlette.requests import Request
from starlette.responses import Response

from pallas_registry.catalogue import Entry, encode

JSON = "application/json"


@dataclass(frozen=True, slots=True)
class Rendered:
    """A response body ready to send, and its strong ETag."""

    body: bytes
    etag: str

    @classmethod
    def of(cls, body: bytes) -> Rendered:
        """Wrap `body`, computing its ETag."""
        return cls(body, '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"')


class ResponseCache:
    """A bounded LRU of rendered bodies; keys include the catalogue version, so never stale."""

    def __init__(self, size: int = 256) -> None:
        """Keep at most `size` bodies."""
        self._items: LRUCache[Hashable, Rendered] = LRUCache(maxsize=size)

    def get(self, key: Hashable) -> Rendered | None:
        """The cached body for `key`, if any (marks it recently used)."""
        return self._items.get(key)

    def put(self, key: Hashable, rendered: Rendered) -> Rendered:
        """Cache `rendered` under `key` and return it."""
        self._items[key] = rendered
        return rendered


def server_list(entries: Iterable[Entry], metadata: dict[str, object] | None = None) -> bytes:
    """`{"servers": [...], "metadata": {...}}` from pre-encoded entries (no re-encoding)."""
    body = b'{"servers":[' + b",".join(entry.body for entry in entries) + b"]"
    if metadata is not None:
        body += b',"metadata":' + encode(metadata)
    return body + b"}"


def _matches(header: str, etag: str) -> bool:
    # RFC 9110: If-None-Match uses weak comparison, so W/"x" matches "x".
    tags = [tag.strip().removeprefix("W/") for tag in header.split(",")]
    return "*" in tags or etag in tags


def respond(request: Request, rendered: Rendered) -> Response:
    """200 with the body, or 304 when the client's `If-None-Match` already has this ETag."""
    headers = {"ETag": rendered.etag, "Cache-Control": "no-cache"}
    if _matches(request.headers.get("if-none-match", ""), rendered.etag):
        return Response(status_code=304, headers=headers)
    return Response(rendered.body, media_type=JSON, headers=headers)


_KINDS: dict[int, tuple[str, str]] = {
    404: ("NOT_FOUND", "upstream"),
    500: ("INTERNAL", "internal"),
    503: ("NOT_READY", "internal"),
}
"""An error status's `code` and `category` (the kinds of seed 004's BridgeError: `upstream` for
what was asked for and is not there, `internal` for the registry's own state); every other
status is the request's fault (`INVALID_ARGUMENTS`, category `request`)."""


def error_body(status: int, message: str, parameter: str | None = None) -> bytes:
    """A JSON error `{"error": message, "code", "category"}` (the registry API's body, coded)."""
    code, category = _KINDS.get(status, ("INVALID_ARGUMENTS", "request"))
    payload: dict[str, str] = {"error": message, "code": code, "category": category}
    if parameter is not None:
        payload["parameter"] = parameter
    return encode(payload)


def error(status: int, message: str, parameter: str | None = None) -> Response:
    """The JSON error response of `error_body`."""
    return Response(error_body(status, message, parameter), status_code=status, media_type=JSON)
