"""The watches behind event triggers: one per watched kind, shared by every trigger on it.

A watch starts with the first trigger on its kind and stops with the last (no watch, no API
connection, when no event trigger needs it). Each event goes to every trigger on the kind
through the pure matcher (`pallas_api.triggers.event`: namespace, labels, type, `when`); a
match fires the trigger's run engine, as a schedule time does, so concurrency, the per-minute
bound, history, Events and metrics are the same.

The initial list of a watch (and the list after a gap) fires nothing: those objects existed
before, and a trigger created on a busy namespace must not start a run per object. A change
made during a gap is not replayed either (the watch resumes from a fresh list).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pallas_api.spec import TriggerEvent
from pallas_api.triggers.event import decide, in_scope, kind_resource, split_api_version
from pallas_api.triggers.when import Condition, compile_condition
from pallas_io.triggers.runs import TriggerEngine
from pallas_operator.k8s.cluster import Cluster, WatchedKind, WatchEvent
from pallas_operator.k8s.listing import ALL_NAMESPACES

log = logging.getLogger(__name__)
TriggerKey = tuple[str, str]
RESTART_SECONDS = 5.0
WatchKey = tuple[WatchedKind, str]
"""(the kind, the namespace watched: "*" when the operator watches every namespace)"""


def watched_kind(event: TriggerEvent) -> WatchedKind:
    """The kind an event trigger names, with its resource as the API machinery guesses it."""
    group, version = split_api_version(event.api_version)
    return WatchedKind(group, version, event.kind, kind_resource(event.kind))


@dataclass(frozen=True, slots=True)
class _Subscriber:
    engine: TriggerEngine
    event: TriggerEvent
    namespace: str
    condition: Condition | None


@dataclass
class _Watch:
    task: asyncio.Task[None] | None = None
    subscribers: dict[TriggerKey, _Subscriber] = field(default_factory=dict)
    last: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Each object as last seen, for `oldObject`; kept only while some `when` reads it."""


class EventWatches:
    """The event watches of one operator."""

    def __init__(self, cluster: Cluster, namespaces: Sequence[str] = ()) -> None:
        self._cluster = cluster
        self._namespaces = tuple(namespaces)
        self._watches: dict[WatchKey, _Watch] = {}
        self._of: dict[TriggerKey, WatchKey] = {}

    def scope(self, namespace: str) -> str:
        """What a watch for objects of `namespace` covers.

        Every namespace when the operator watches every one (one watch per kind), else that
        namespace: its rights there may come from a Role of that namespace only.
        """
        return namespace if self._namespaces else ALL_NAMESPACES

    def watching(self) -> set[WatchKey]:
        """The watches running."""
        return set(self._watches)

    def subscribe(self, key: TriggerKey, engine: TriggerEngine, event: TriggerEvent) -> None:
        """Fire `engine` on the events of `event`'s kind from now on (replacing `key`'s earlier one)."""
        self.unsubscribe_now(key)
        namespace = event.namespace or key[0]
        condition = compile_condition(event.when) if event.when else None  # checked when admitted
        wkey = (watched_kind(event), self.scope(namespace))
        watch = self._watches.setdefault(wkey, _Watch())
        watch.subscribers[key] = _Subscriber(engine, event, namespace, condition)
        self._of[key] = wkey
        if watch.task is None:
            watch.task = asyncio.create_task(self._follow(wkey, watch), name=f"event watch {wkey}")
            log.info("watching %s in %s for event triggers", wkey[0].plural, wkey[1])

    def unsubscribe_now(self, key: TriggerKey) -> asyncio.Task[None] | None:
        """Stop firing `key`; the watch's task when it was the last on its kind (cancelled)."""
        wkey = self._of.pop(key, None)
        watch = self._watches.get(wkey) if wkey is not None else None
        if wkey is None or watch is None:
            return None
        watch.subscribers.pop(key, None)
        if watch.subscribers:
            return None
        del self._watches[wkey]
        log.info("stopped watching %s in %s: no event trigger left on it", wkey[0].plural, wkey[1])
        if watch.task is not None:
            watch.task.cancel()
        return watch.task

    async def unsubscribe(self, key: TriggerKey) -> None:
        """Stop firing `key`, and its watch once it was the last trigger on the kind."""
        task = self.unsubscribe_now(key)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        """Stop every watch."""
        for key in list(self._of):
            await self.unsubscribe(key)

    async def _follow(self, wkey: WatchKey, watch: _Watch) -> None:
        # The seam's watch retries the API's failures itself; anything else (a bug, an object
        # it cannot read) must not leave the triggers Ready with no watch behind them.
        while True:
            try:
                async for event in self._cluster.watch_objects(*wkey):
                    await self._dispatch(watch, event)
            except Exception:
                log.exception("the watch of %s in %s failed: starting it again", wkey[0].plural, wkey[1])
            await asyncio.sleep(RESTART_SECONDS)

    async def _dispatch(self, watch: _Watch, event: WatchEvent) -> None:
        obj = event.object
        meta: Mapping[str, Any] = obj.get("metadata") or {}
        ident = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        old = watch.last.get(ident)
        if any(
            s.condition is not None and "oldObject" in s.condition.source for s in watch.subscribers.values()
        ):
            if event.type == "DELETED":
                watch.last.pop(ident, None)
            else:
                watch.last[ident] = obj
        else:
            watch.last.clear()
        if event.type == "LISTED":  # there before: not a change (module docstring)
            return
        for key, sub in list(watch.subscribers.items()):
            if not in_scope(sub.namespace, sub.event.label_selector, obj):
                continue
            decision = decide(sub.event.types, sub.condition, event.type, obj, old)
            if not decision.fire:
                log.debug(
                    "trigger %s/%s: %s %s/%s does not fire: %s", *key, event.type, *ident, decision.why_not
                )
                continue
            try:
                await sub.engine.fire(decision.values)
            except Exception:  # one trigger's failure must not stop the watch the others share
                log.exception("trigger %s/%s: firing on %s %s/%s failed", *key, event.type, *ident)
