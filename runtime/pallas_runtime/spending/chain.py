"""The budget that travels with delegated calls, beside the call path, in the MCP `_meta`.

An agent calling a peer adds what the turn's root caller has left:

    {"pallas.dev/budget": {"rootCaller": "sub:alice", "tokens": 1200, "cost": 0.25,
                           "resetsAt": "2026-11-29T00:00:00Z"}}

(`tokens` and `cost` each absent when nothing limits them), and the peer's `send_message`
result says in its `_meta` what the peer's turn spent, its own sub-calls included:

    {"pallas.dev/spend": {"tokens": 800, "cost": 0.01}}

Nothing here can raise a budget: a receiving agent takes the travelled budget as a further
restriction over its own, and charges the caller its authentication names (with a forwarded
bearer, the root caller itself); `rootCaller` only names the root caller in messages. A client
forging the metadata can only limit itself. A calling agent adds what a peer reports to its
caller's budget (a peer can only make its caller's spend larger).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pallas_api.health import utc_timestamp
from pallas_api.spending import MICROS, SPEND_META, whole_count

BUDGET_META = "pallas.dev/budget"
"""`_meta` key of a delegated call: what the root caller has left."""
MAX_ROOT = 512


class BadChainBudget(ValueError):
    """A `_meta` budget that is not one; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class ChainBudget:
    """What a delegated call says the root caller has left (None: not limited)."""

    root: str
    tokens: int | None = None
    micros: int | None = None
    resets_at: datetime | None = None

    @classmethod
    def of(cls, meta: Mapping[str, Any] | None) -> ChainBudget | None:
        """The budget a request carried, or None without one.

        Raises:
            BadChainBudget: the value is malformed.
        """
        raw = (meta or {}).get(BUDGET_META)
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raise BadChainBudget(f"_meta {BUDGET_META} must be an object")
        root, tokens, cost, resets = (raw.get(k) for k in ("rootCaller", "tokens", "cost", "resetsAt"))
        if not isinstance(root, str) or not 0 < len(root) <= MAX_ROOT:
            raise BadChainBudget(f"_meta {BUDGET_META}.rootCaller must be 1 to {MAX_ROOT} characters")
        if tokens is not None and (tokens := whole_count(tokens)) is None:
            raise BadChainBudget(f"_meta {BUDGET_META}.tokens must be a whole number >= 0")
        if cost is not None and (
            isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0
        ):
            raise BadChainBudget(f"_meta {BUDGET_META}.cost must be a number >= 0")
        moment = None
        if resets is not None:
            try:
                moment = datetime.fromisoformat(str(resets).replace("Z", "+00:00"))
            except ValueError:
                raise BadChainBudget(f"_meta {BUDGET_META}.resetsAt must be an RFC 3339 time") from None
            if moment.tzinfo is None:  # RFC 3339 requires one; a naive time cannot meet aware ones
                raise BadChainBudget(
                    f"_meta {BUDGET_META}.resetsAt must be an RFC 3339 time with a timezone "
                    "(e.g. 2026-11-29T00:00:00Z)"
                )
        micros = None if cost is None else math.floor(cost * MICROS)
        return cls(root, tokens, micros, moment)

    def to_meta(self) -> dict[str, Any]:
        """The `_meta` entry of a call to a peer."""
        value: dict[str, Any] = {"rootCaller": self.root}
        if self.tokens is not None:
            value["tokens"] = self.tokens
        if self.micros is not None:
            value["cost"] = self.micros / MICROS
        if self.resets_at is not None:
            value["resetsAt"] = utc_timestamp(self.resets_at)
        return {BUDGET_META: value}


def spend_meta(tokens: int, micros: int) -> dict[str, Any]:
    """The `_meta` entry of a result: what its turn spent."""
    return {SPEND_META: {"tokens": tokens, "cost": micros / MICROS}}
