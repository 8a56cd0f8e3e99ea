"""Which objects of a kind exist (the start-up barrier lists them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lightkube import AsyncClient

ALL_NAMESPACES = "*"


async def names_of(
    client: AsyncClient,
    resource: Any,
    namespaces: Iterable[str],
    labels: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """(namespace, name) of every object of `resource` that matches, in pages of 500."""
    found: list[tuple[str, str]] = []
    for namespace in namespaces:
        listing = client.list(
            resource,
            namespace=namespace,
            chunk_size=500,
            labels=dict(labels) if labels else None,
        )
        async for obj in listing:
            meta = obj.metadata
            if meta is not None and meta.name:
                found.append((meta.namespace or "", meta.name))
    return found
