"""The live catalogue: entries built once per agent change, read as immutable snapshots.

Sources feed a `CatalogueStore` (`replace` after a full list, `upsert` / `remove` / `leave_out`
per event); requests read `store.snapshot()`, a `Catalogue` that never changes and carries a
version number, so responses can be rendered and cached once per version. Each entry keeps its
JSON pre-encoded, so a page is a join of byte strings.

Agents that disappear stay for `tombstone_ttl` seconds as `deleted` entries, so clients syncing
with `updated_since` learn about deletions (the registry API includes deleted servers then).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pallas_api.spec import AccessSpec, AuthSpec
from pallas_registry.builder import InvalidAgent, build_response
from pallas_registry.naming import cluster_url
from pallas_registry.schema import OFFICIAL_META
from pallas_registry.state import AgentState, utcnow

log = logging.getLogger("pallas.registry")

Key = tuple[str, str]


def encode(document: Any) -> bytes:
    """Compact UTF-8 JSON, as every registry response is sent."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Entry:
    """One agent's published entry and the fields requests filter on."""

    key: Key
    name: str
    title: str
    version: str
    status: str
    ready: bool
    tags: frozenset[str]
    updated: datetime | None
    document: dict[str, Any]
    body: bytes
    endpoint: str = ""
    """Where the registry itself reaches the agent's MCP endpoint (`status.url`, else cluster
    DNS): the fleet relays there, whatever public URL clients are given."""
    auth: AuthSpec = dataclasses.field(default_factory=AuthSpec)
    """Its deployment's `spec.auth`: how the fleet endpoint checks a caller for it."""
    access: AccessSpec = dataclasses.field(default_factory=AccessSpec)
    """Its `spec.access`: which authenticated callers it admits."""

    @classmethod
    def build(cls, state: AgentState) -> Entry:
        """Build and validate the entry of `state`.

        Raises:
            InvalidAgent: when no valid entry can be made.
        """
        document = build_response(state)
        server = document["server"]
        return cls(
            key=state.key,
            name=server["name"],
            title=server["title"],
            version=server["version"],
            status=document["_meta"][OFFICIAL_META]["status"],
            ready=state.ready and not state.deleting,
            tags=frozenset(state.tags),
            updated=state.updated_at or state.published_at,
            document=document,
            body=encode(document),
            endpoint=state.url or cluster_url(state),
            auth=state.auth_spec,
            access=state.access,
        )


@dataclass(frozen=True, slots=True)
class Catalogue:
    """An immutable snapshot: entries sorted by server name, tombstones included."""

    version: int
    entries: tuple[Entry, ...]
    by_name: Mapping[str, Entry]
    left_out: int

    def count(self, status: str) -> int:
        """How many entries have this official status."""
        return sum(1 for entry in self.entries if entry.status == status)


EMPTY = Catalogue(version=0, entries=(), by_name={}, left_out=0)


class CatalogueStore:
    """The mutable side: agent states in, catalogue snapshots out. Not thread-safe (one loop)."""

    def __init__(
        self,
        *,
        tombstone_ttl: float = 900.0,
        clock: Callable[[], datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Start empty.

        Args:
            tombstone_ttl: Seconds a removed agent stays listed as `deleted`.
            clock: Wall clock for tombstones' `updatedAt`.
            monotonic: Clock for tombstone expiry.
        """
        self._ttl = tombstone_ttl
        self._clock = clock
        self._monotonic = monotonic
        self._states: dict[Key, AgentState] = {}
        self._entries: dict[Key, Entry] = {}
        self._tombstones: dict[Key, tuple[float, Entry]] = {}
        self._left_out: dict[Key, str] = {}
        self._version = 0
        self._snapshot = EMPTY

    @property
    def version(self) -> int:
        """Bumped on every change a client could see."""
        return self._version

    def upsert(self, state: AgentState) -> None:
        """Add or update one agent (an invalid one is left out, with one warning per reason)."""
        if self._states.get(state.key) == state:
            return
        try:
            entry = Entry.build(state)
        except InvalidAgent as exc:
            self.leave_out(state.key, str(exc))
            return
        self._states[state.key] = state
        if self._left_out.pop(state.key, None) is not None:
            self._changed()
        self._tombstones.pop(state.key, None)
        held = self._entries.get(state.key)
        self._entries[state.key] = entry
        if held is None or held.body != entry.body:
            self._changed()

    def leave_out(self, key: Key, reason: str, level: int = logging.WARNING) -> None:
        """Keep an agent out of the catalogue (missing or invalid status) without a tombstone.

        The reason is logged at `level` when it changes (INFO suits "no status yet", which every
        new agent goes through).
        """
        held = self._left_out.get(key)
        if held != reason:
            log.log(level, "registry: leaving out agent %s/%s: %s", key[0], key[1], reason)
        self._left_out[key] = reason
        self._states.pop(key, None)
        # The left-out count is part of the snapshot (it is exported as a metric).
        if self._entries.pop(key, None) is not None or held is None:
            self._changed()

    def remove(self, key: Key) -> None:
        """An agent is gone: its entry becomes a `deleted` tombstone."""
        self._left_out.pop(key, None)
        state = self._states.pop(key, None)
        entry = self._entries.pop(key, None)
        if state is None or entry is None:
            return
        gone = dataclasses.replace(state, deleting=True, ready=False, updated_at=self._clock())
        # The live entry was valid, so its tombstone is too; guard anyway rather than lose the removal.
        with contextlib.suppress(InvalidAgent):
            self._tombstones[key] = (self._monotonic(), Entry.build(gone))
        self._changed()

    def replace(
        self,
        states: Iterable[AgentState],
        left_out: Mapping[Key, str] | None = None,
        level: int = logging.WARNING,
    ) -> None:
        """Swap in a complete list (after a relist): unseen agents become tombstones, atomically.

        `left_out` are agents known to exist but not publishable, with the reason (logged at
        `level`, as by `leave_out`).
        """
        fresh = {state.key: state for state in states}
        for key in [k for k in self._states if k not in fresh]:
            self.remove(key)
        for key, reason in (left_out or {}).items():
            self.leave_out(key, reason, level)
        for key in [k for k in self._left_out if k not in fresh and k not in (left_out or {})]:
            del self._left_out[key]
            self._changed()
        for state in fresh.values():
            self.upsert(state)

    def _changed(self) -> None:
        self._version += 1

    def _expire_tombstones(self) -> None:
        horizon = self._monotonic() - self._ttl
        expired = [key for key, (since, _) in self._tombstones.items() if since < horizon]
        for key in expired:
            del self._tombstones[key]
        if expired:
            self._changed()

    def snapshot(self) -> Catalogue:
        """The current catalogue (rebuilt only when something changed since the last call)."""
        if self._tombstones:
            self._expire_tombstones()
        if self._snapshot.version == self._version:
            return self._snapshot
        by_name: dict[str, Entry] = {}
        live = sorted(self._entries.values(), key=lambda e: e.key)
        dead = [entry for _, entry in self._tombstones.values()]
        for entry in [*live, *dead]:
            held = by_name.get(entry.name)
            if held is not None:
                if entry.status != "deleted":
                    log.warning(
                        "registry: agents %s and %s share server name %s", held.key, entry.key, entry.name
                    )
                continue
            by_name[entry.name] = entry
        entries = tuple(sorted(by_name.values(), key=lambda e: e.name))
        self._snapshot = Catalogue(self._version, entries, by_name, len(self._left_out))
        return self._snapshot
