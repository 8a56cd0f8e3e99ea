"""The watch behind event triggers: list, then watch from the list's version, again after a gap.

Not lightkube's own restart (it re-watches from no version after a 410, which replays every
object as ADDED and would fire triggers for objects that did not change): a list marks what is
there as `LISTED`, and the watch that follows starts at the list's resourceVersion.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_namespaced_resource

from pallas_operator.k8s.cluster import WatchedKind, WatchEvent, WatchType

log = logging.getLogger(__name__)
RETRY_SECONDS = 5.0
"""Pause after a failed list or watch before listing again (RBAC missing, API server away)."""
PAGE = 500
_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED"})


async def watch_objects(client: AsyncClient, kind: WatchedKind, namespace: str) -> AsyncIterator[WatchEvent]:
    """See `Cluster.watch_objects`."""
    resource = create_namespaced_resource(kind.group, kind.version, kind.kind, kind.plural)
    where = f"{kind.plural}.{kind.group or 'core'} in {namespace}"
    while True:
        try:
            listing = client.list(resource, namespace=namespace, chunk_size=PAGE)
            async for obj in listing:
                yield WatchEvent("LISTED", _body(obj))
            version = listing.resourceVersion
            async for event_type, obj in client.watch(
                resource, namespace=namespace, resource_version=version
            ):
                if event_type in _TYPES:  # BOOKMARK and others carry no change
                    yield WatchEvent(cast(WatchType, event_type), _body(obj))
        except ApiError as exc:
            if exc.status.code != 410:  # 410: the version expired, list again at once
                log.warning(
                    "watching %s failed (%s): retrying in %.0f s", where, exc.status.code, RETRY_SECONDS
                )
                await asyncio.sleep(RETRY_SECONDS)
        except httpx2.HTTPError as exc:
            log.warning(
                "watching %s failed (%s): retrying in %.0f s", where, type(exc).__name__, RETRY_SECONDS
            )
            await asyncio.sleep(RETRY_SECONDS)


def _body(obj: Any) -> dict[str, Any]:
    # lightkube's generic resources are untyped; their `to_dict` is the object as the API sent it.
    return cast(dict[str, Any], obj.to_dict())
