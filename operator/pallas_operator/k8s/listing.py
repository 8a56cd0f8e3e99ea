"""Whether objects of a kind exist: one cheap list request per namespace (a page of one item)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lightkube import AsyncClient

ALL_NAMESPACES = "*"


async def none_exist(
    client: AsyncClient,
    resource: Any,
    namespaces: Iterable[str],
    labels: Mapping[str, str] | None = None,
    fields: Mapping[str, Any] | None = None,
) -> bool:
    """True when no object of `resource` matches the selectors in any of `namespaces` ("*": all)."""
    for namespace in namespaces:
        listing = client.list(
            resource,
            namespace=namespace,
            chunk_size=1,
            labels=dict(labels) if labels else None,
            fields=dict(fields) if fields else None,
        )
        async for _ in listing:
            return False
    return True
