"""What conversations kept in a process weigh, and keeping them within a byte bound (`history.maxBytes`).

The memory store's conversations and a database store's cached transcripts were bounded by
count alone: 1,000 conversations of a few 1 MiB messages each took an agent from 256 MB to
almost 1 GB, and it stayed there. Both are now bounded in bytes too (`history.maxBytes`).

A message's weight is measured once, when it enters the process, from what is already at
hand: `sys.getsizeof` of each string (constant time; it is the string's real footprint,
header included), twice the JSON length of tool-call arguments (a dict of short values takes
about that), and a fixed allowance per message and per part for the objects around them.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Generic, TypeVar

from pallas_runtime.messages import AssistantMessage, ContentPart, Message, TextPart, TurnFailure, UserMessage

MESSAGE_OVERHEAD = 200
"""Bytes of the message object, its tuple and its place in a list."""
PART_OVERHEAD = 100
"""Bytes of a part, a tool call or a tool result object."""


def _part(part: ContentPart) -> int:
    if isinstance(part, TextPart):
        return PART_OVERHEAD + sys.getsizeof(part.text)
    return PART_OVERHEAD + sys.getsizeof(part.data) + sys.getsizeof(part.mime_type)


def _parts(parts: Sequence[ContentPart]) -> int:
    return sum(_part(p) for p in parts)


def footprint(message: Message) -> int:
    """About how many bytes `message` holds in this process."""
    if isinstance(message, UserMessage):
        return MESSAGE_OVERHEAD + _parts(message.content)
    if isinstance(message, AssistantMessage):
        calls = sum(
            PART_OVERHEAD + sys.getsizeof(c.id) + sys.getsizeof(c.name) + 2 * len(json.dumps(c.arguments))
            for c in message.tool_calls
        )
        return MESSAGE_OVERHEAD + sys.getsizeof(message.text) + calls
    if isinstance(message, TurnFailure):
        return MESSAGE_OVERHEAD + sys.getsizeof(message.code) + sys.getsizeof(message.message)
    return MESSAGE_OVERHEAD + sum(
        PART_OVERHEAD + sys.getsizeof(r.call_id) + sys.getsizeof(r.name) + _parts(r.content)
        for r in message.results
    )


def first_within(roles: Sequence[str], sizes: Sequence[int], limit: int) -> int:
    """The index of the first message to keep so the rest weigh at most `limit`.

    The cut falls before a user message; the newest turn is kept whatever it weighs.
    """
    total = 0
    for index in range(len(sizes) - 1, -1, -1):
        total += sizes[index]
        if total > limit:
            break
    else:
        return 0
    for keep in range(index + 1, len(roles)):
        if roles[keep] == "user":
            return keep
    for keep in range(len(roles) - 1, -1, -1):  # not even the newest turn fits: keep just it
        if roles[keep] == "user":
            return keep
    return 0


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SizedLru(Generic[K, V]):
    """Values by key, least recently used first, with their weights summed.

    `evict` drops the least recently used values until both bounds hold, skipping the keys the
    caller says to keep (a conversation a turn holds is never dropped under it).
    """

    def __init__(self, *, max_items: int, max_bytes: int) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.bytes = 0
        """The summed weight of every value kept."""
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        """How many values are kept."""
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        """The keys, least recently used first."""
        return iter(self._items)

    def __contains__(self, key: object) -> bool:
        """Whether a value is kept under `key`."""
        return key in self._items

    def get(self, key: K) -> V | None:
        """The value under `key` (now the most recently used), or None."""
        entry = self._items.get(key)
        if entry is None:
            return None
        self._items.move_to_end(key)
        return entry[0]

    def peek(self, key: K) -> V | None:
        """The value under `key`, leaving the order alone."""
        entry = self._items.get(key)
        return None if entry is None else entry[0]

    def items(self) -> Iterator[tuple[K, V]]:
        """Keys and values, least recently used first (a snapshot: safe to change meanwhile)."""
        return iter([(key, value) for key, (value, _) in self._items.items()])

    def put(self, key: K, value: V, weight: int) -> None:
        """Keep `value` under `key` with its weight, as the most recently used."""
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._items[key] = (value, weight)
        self.bytes += weight

    def pop(self, key: K) -> V | None:
        """Forget `key`; its value, or None."""
        entry = self._items.pop(key, None)
        if entry is None:
            return None
        self.bytes -= entry[1]
        return entry[0]

    def evict(self, keep: Callable[[K], bool]) -> list[K]:
        """Drop the least recently used values (not those `keep` names) until within both bounds.

        Returns:
            The keys dropped, oldest first. The walk stops once the bounds hold, so it costs
            what it drops (plus the kept keys it passes), not what is kept.
        """
        count, weight = len(self._items), self.bytes
        dropped: list[K] = []
        for key, (_, size) in self._items.items():
            if count <= self.max_items and weight <= self.max_bytes:
                break
            if keep(key):
                continue
            dropped.append(key)
            count, weight = count - 1, weight - size
        for key in dropped:
            self.pop(key)
        return dropped
