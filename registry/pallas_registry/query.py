"""Query parameters of the catalogue lists: parsing, filtering and keyset pagination. Pure.

Pages are ordered by server name and the cursor is the last name of the previous page
(`base64url("1:" + name)`, unpadded; opaque to clients). A page starts strictly after it, so
an agent that exists during the whole walk is seen exactly once however the catalogue changes
in between; agents added or removed meanwhile are seen at most once.

Every problem is a `BadParameter` naming the parameter; unknown parameters are ignored, as HTTP
APIs usually do.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pallas_api.names import DNS_LABEL
from pallas_registry.catalogue import Catalogue, Entry
from pallas_registry.schema import is_date_time

DEFAULT_LIMIT = 30
MAX_LIMIT = 100
MAX_VALUE = 512
"""Longest accepted value of any parameter (search text, version, cursor...)."""
TAG = re.compile(DNS_LABEL)
SERVER_NAME = re.compile(r"^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$")
_CURSOR_PREFIX = "1:"
_BASE64URL = re.compile(r"^[A-Za-z0-9_-]+$")
_TRUE = ("true", "1")
_FALSE = ("false", "0")
KNOWN = (
    "cursor",
    "limit",
    "search",
    "updated_since",
    "version",
    "capability",
    "ready",
    "include",
    "include_deleted",
)


class BadParameter(ValueError):
    """A query or path parameter the registry cannot honour; the message names it."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"invalid parameter {parameter!r}: {message}")
        self.parameter = parameter


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed, validated list request (hashable: it is part of the response cache key)."""

    after: str | None = None
    limit: int = DEFAULT_LIMIT
    search: str | None = None
    updated_since: datetime | None = None
    version: str | None = None
    capability: str | None = None
    ready_only: bool = False
    include_deleted: bool = False


def encode_cursor(name: str) -> str:
    """The opaque cursor that resumes after server `name`."""
    return base64.urlsafe_b64encode((_CURSOR_PREFIX + name).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The server name a cursor resumes after.

    Raises:
        BadParameter: the cursor was not made by `encode_cursor`.
    """
    problem = BadParameter("cursor", "malformed; pass back metadata.nextCursor unchanged")
    if not _BASE64URL.match(cursor):
        raise problem
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise problem from None
    name = text.removeprefix(_CURSOR_PREFIX)
    if not text.startswith(_CURSOR_PREFIX) or not SERVER_NAME.match(name):
        raise problem
    return name


def _flag(parameter: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise BadParameter(parameter, "must be true or false")


def _limit(value: str) -> int:
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
        raise BadParameter("limit", f"must be an integer from 1 to {MAX_LIMIT}")
    return int(value)


def _timestamp(value: str) -> datetime:
    if not is_date_time(value):
        raise BadParameter("updated_since", "must be an RFC 3339 date-time, e.g. 2026-01-02T03:04:05Z")
    return datetime.fromisoformat(value.upper().replace("Z", "+00:00")).astimezone(UTC)


def parse_query(pairs: Iterable[tuple[str, str]]) -> Query:
    """Validate the list parameters.

    They are `cursor`, `limit`, `search`, `updated_since`, `version`, `capability`, `ready`,
    `include` and `include_deleted`. Every accepted agent is listed unless `ready=true`; `include`
    is what older clients send: `all` is the default now, `ready` means `ready=true`.

    Raises:
        BadParameter: a repeated, over-long or malformed parameter.
    """
    given: dict[str, str] = {}
    for key, value in pairs:
        if key not in KNOWN:
            continue
        if key in given:
            raise BadParameter(key, "given more than once")
        if len(value) > MAX_VALUE:
            raise BadParameter(key, f"longer than {MAX_VALUE} characters")
        given[key] = value
    include = given.get("include", "all")
    if include not in ("ready", "all"):
        raise BadParameter("include", "must be 'all' (every phase, the default) or 'ready'")
    ready_only = include == "ready"
    if "ready" in given:
        ready_only = _flag("ready", given["ready"])
    capability = given.get("capability")
    if capability is not None and (len(capability) > 63 or not TAG.match(capability)):
        raise BadParameter("capability", "must be a tag of lower-case letters, digits and '-'")
    updated_since = _timestamp(given["updated_since"]) if "updated_since" in given else None
    # As in the registry API, a sync by time must also see deletions.
    syncing = updated_since is not None
    version = given.get("version") or None
    include_deleted = syncing
    if "include_deleted" in given:
        include_deleted = _flag("include_deleted", given["include_deleted"]) or syncing
    return Query(
        after=decode_cursor(given["cursor"]) if given.get("cursor") else None,
        limit=_limit(given["limit"]) if "limit" in given else DEFAULT_LIMIT,
        search=given.get("search", "").casefold() or None,
        updated_since=updated_since,
        version=None if version == "latest" else version,
        capability=capability,
        ready_only=ready_only,
        include_deleted=include_deleted,
    )


def _matches(entry: Entry, query: Query) -> bool:
    if entry.status == "deleted":
        if not query.include_deleted:
            return False
    elif query.ready_only and not entry.ready:
        return False
    if query.capability is not None and query.capability not in entry.tags:
        return False
    if query.version is not None and entry.version != query.version:
        return False
    if query.search is not None and query.search not in f"{entry.name}\n{entry.title}".casefold():
        return False
    # `>=`: a client passing the newest updatedAt it saw gets that entry again rather than miss
    # another one updated within the same second.
    return query.updated_since is None or (entry.updated is not None and entry.updated >= query.updated_since)


def select(catalogue: Catalogue, query: Query) -> list[Entry]:
    """The entries matching `query`'s filters, in server-name order.

    A `capability` no agent declares selects nothing: tags come and go with agents, so a client
    asking for one that is absent right now is not wrong, just early or late.
    """
    return [entry for entry in catalogue.entries if _matches(entry, query)]


def page(entries: Sequence[Entry], query: Query) -> tuple[list[Entry], str | None]:
    """One page of `entries` (sorted by name) after the cursor, and the cursor of the next one."""
    start = 0
    if query.after is not None:
        start = bisect.bisect_right(entries, query.after, key=lambda entry: entry.name)
    items = list(entries[start : start + query.limit])
    more = start + query.limit < len(entries)
    return items, encode_cursor(items[-1].name) if more and items else None
