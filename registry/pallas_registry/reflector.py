"""List-then-watch of one resource kind that survives expiry, 410 Gone and API outages.

The loop lists once (handing the complete list over in one call, so the consumer can swap its
view atomically), then watches from the list's resourceVersion, remembering the version of every
event. When the watch ends as planned it resumes from that version; a 410 (the version is too old to
resume from) and a failed connection cost a relist. During an outage it retries with capped
backoff and the consumer keeps its last good view: nothing is cleared until a new list has
arrived.

Each watch is also bounded on the client side: a half-open connection (a partition rather than
a closed socket) would otherwise hang forever without an error.

The operator watches through kopf instead; why the product keeps two list-watch engines for now
is a decision in docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.core.client import FieldSelector
from lightkube.generic_resource import GenericNamespacedResource

from pallas_io.backoff import backoff

log = logging.getLogger("pallas.registry")

ListHandler = Callable[[list[Mapping[str, Any]]], None]
EventHandler = Callable[[str, Mapping[str, Any]], None]
RestartCounter = Callable[[str], None]
_MIN_BACKOFF = 0.2
_OPTIONAL_RETRY = 60.0


def _plain(obj: GenericNamespacedResource) -> Mapping[str, Any]:
    plain: Mapping[str, Any] = obj.to_dict()  # type: ignore[no-untyped-call]  # lightkube leaves it untyped
    return plain


class Reflector:
    """Keeps a consumer in step with one namespaced kind; see the module docstring."""

    def __init__(
        self,
        client: AsyncClient,
        resource: type[GenericNamespacedResource],
        namespace: str,
        *,
        on_list: ListHandler,
        on_event: EventHandler,
        count_restart: RestartCounter,
        name: str | None = None,
        optional: bool = False,
        watch_timeout: int = 240,
        max_backoff: float = 5.0,
    ) -> None:
        """Configure; nothing happens before `run()`.

        Args:
            client: The API client.
            resource: The kind to reflect.
            namespace: Its namespace.
            on_list: Called with every object after each (re)list.
            on_event: Called with `ADDED`/`MODIFIED`/`DELETED` and the object.
            count_restart: Called with a reason each time the watch restarts.
            name: Reflect only the object of this name.
            optional: A 403/404 on list (no permission, kind not installed) counts as an empty
                list, retried slowly, instead of blocking readiness.
            watch_timeout: Seconds the API server keeps one watch open.
            max_backoff: Longest pause between retries during an outage.
        """
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._fields: FieldSelector | None = {"metadata.name": name} if name else None
        self._on_list = on_list
        self._on_event = on_event
        self._count_restart = count_restart
        self._optional = optional
        self._watch_timeout = watch_timeout
        self._max_backoff = max_backoff
        self._version: str | None = None
        self._failures = 0  # API calls failed in a row: how long the next pause is
        self.synced = False
        """True once a first list has been handed over."""
        self.healthy = False
        """True while the last API call succeeded."""

    def _set_healthy(self, healthy: bool, problem: str = "") -> None:
        if healthy:
            self._failures = 0
        if healthy != self.healthy:
            kind = self._resource.__name__
            if healthy:
                log.info("registry: %s watch is back", kind)
            else:
                log.warning("registry: %s watch interrupted: %s", kind, problem)
        self.healthy = healthy

    async def _list(self) -> None:
        listing = self._client.list(
            self._resource, namespace=self._namespace, fields=self._fields, chunk_size=500
        )
        objects = [_plain(obj) async for obj in listing]
        self._version = listing.resourceVersion
        # Synced before the hand-over: the consumer publishes once every reflector is synced.
        self.synced = True
        self._on_list(objects)

    async def _watch(self) -> None:
        stream = self._client.watch(
            self._resource,
            namespace=self._namespace,
            fields=self._fields,
            server_timeout=self._watch_timeout,
            resource_version=self._version,
        )
        async with asyncio.timeout(self._watch_timeout + 15), contextlib.aclosing(stream) as events:  # type: ignore[type-var]
            async for kind, obj in events:
                self._set_healthy(True)
                self._version = obj.metadata.resourceVersion if obj.metadata else self._version
                self._on_event(kind, _plain(obj))

    async def _without(self, code: int) -> None:
        # An optional kind we may not read (403) or that is not installed (404): the API server
        # answered, so this is not an outage; go on without it and look again now and then.
        if not self.synced:
            log.warning(
                "registry: cannot list %s (HTTP %d); going on without it", self._resource.__name__, code
            )
        self.synced = True
        self.healthy = True
        self._on_list([])
        await asyncio.sleep(_OPTIONAL_RETRY)

    async def _pause(self) -> None:
        await asyncio.sleep(backoff(self._failures, first=_MIN_BACKOFF, cap=self._max_backoff))
        self._failures += 1

    async def run(self) -> None:
        """Reflect until cancelled."""
        while True:
            try:
                if self._version is None:
                    await self._list()
                    self._set_healthy(True)
                await self._watch()
                self._count_restart("timeout")
            except TimeoutError:
                self._count_restart("timeout")
            except ApiError as exc:
                code = exc.status.code
                if code == 410:
                    # Too old to resume from: relist (the consumer swaps views atomically).
                    self._version = None
                    self._count_restart("expired")
                    continue
                if self._optional and code in (403, 404) and self._version is None:
                    await self._without(code)
                    continue
                self._set_healthy(False, f"{code} {exc.status.message or ''}".strip())
                self._count_restart("error")
                await self._pause()
            except Exception as exc:  # noqa: BLE001 - see below
                # Connection refused/reset, TLS or protocol errors during an outage. Relist when
                # it ends rather than resume: the list both proves the API is back (a resumed
                # watch on a quiet kind would say nothing) and swaps in the truth atomically.
                self._version = None
                self._set_healthy(False, f"{type(exc).__name__}: {exc}")
                self._count_restart("error")
                await self._pause()
