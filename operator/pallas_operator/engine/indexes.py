"""In-memory indexes of watched objects, filled by the event handlers.

Like kopf's indexes (each object contributes `{key: value}`, a lookup returns the values of every
object under a key, a deleted object's contributions go), without kopf's start-up barrier: kopf
gives every existing object of an indexed kind a toggle that all other objects' workers wait on,
so a start-up over N objects wakes waiters O(N²) times (95 s of CPU for a restart over 1,000
agents and their 3,000 children). The operator's own barrier (`engine.startup`) costs O(N).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Any

ObjectKey = tuple[str, str, str]
"""(kind, namespace, name) of a watched object."""


class Index(Mapping[Hashable, tuple[Any, ...]]):
    """Index key → the values the objects contributed under it."""

    def __init__(self) -> None:
        self._by_object: dict[ObjectKey, dict[Hashable, Any]] = {}
        self._by_key: dict[Hashable, dict[ObjectKey, Any]] = {}

    def put(self, obj: ObjectKey, contributions: Mapping[Hashable, Any] | None) -> None:
        """Replace what `obj` contributes (None or empty: nothing)."""
        self.remove(obj)
        if contributions:
            self._by_object[obj] = dict(contributions)
            for key, value in contributions.items():
                self._by_key.setdefault(key, {})[obj] = value

    def remove(self, obj: ObjectKey) -> None:
        """Forget what `obj` contributed."""
        for key in self._by_object.pop(obj, {}):
            values = self._by_key[key]
            del values[obj]
            if not values:
                del self._by_key[key]

    def __getitem__(self, key: Hashable) -> tuple[Any, ...]:
        return tuple(self._by_key[key].values())

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)
