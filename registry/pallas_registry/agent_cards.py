"""`GET /a2a/agent-cards`: the A2A Agent Cards of every agent in the catalogue, at one URL.

An A2A client (or a platform importing agents, as Ark's `A2AServer` does) reads one document
instead of one card per agent. The cards are the agents' own, read from each agent's card URL
(its entry's `_meta["dev.pallas/agent"].a2a.agentCard`) and kept `CARD_TTL` seconds, so the
document says exactly what each agent serves. An agent whose card cannot be read is listed with
the error instead of a card; agents that serve no A2A, and deleted ones, are left out.
`?ready=true` keeps the agents ready now.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx2

from pallas_registry.builder import VENDOR_META
from pallas_registry.catalogue import Entry

CARD_TTL = 10.0
"""Seconds a card read from an agent is reused."""
CARD_TIMEOUT = 3.0
"""Seconds one card read may take."""
MAX_CARD_BYTES = 256 * 1024
"""A card larger than this is reported as an error, not served."""


def card_url(entry: Entry) -> str | None:
    """The entry's Agent Card URL, or None when the agent serves no A2A."""
    vendor = entry.document.get("_meta", {}).get(VENDOR_META, {})
    a2a = vendor.get("a2a") if isinstance(vendor, Mapping) else None
    url = a2a.get("agentCard") if isinstance(a2a, Mapping) else None
    return url if isinstance(url, str) else None


class AgentCards:
    """Reads and caches the cards of the catalogue's agents."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}
        self._client: httpx2.AsyncClient | None = None

    async def _read(self, url: str) -> dict[str, Any]:
        cached = self._cache.get(url)
        if cached is not None and time.monotonic() - cached[0] < CARD_TTL:
            return cached[1]
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=CARD_TIMEOUT)
        try:
            response = await self._client.get(url, headers={"Accept": "application/json"})
            if response.status_code != 200:
                result: dict[str, Any] = {"error": f"HTTP {response.status_code}"}
            elif len(response.content) > MAX_CARD_BYTES:
                result = {"error": f"the card is larger than {MAX_CARD_BYTES} bytes"}
            else:
                result = {"card": response.json()}
        except (httpx2.HTTPError, ValueError) as exc:
            result = {"error": str(exc) or type(exc).__name__}
        self._cache[url] = (time.monotonic(), result)
        return result

    async def document(self, entries: Iterable[Entry], *, ready_only: bool) -> dict[str, Any]:
        """`{"agents": [{"name", "agentCard", "card" | "error"}]}` for the listed entries."""
        wanted = [
            (entry, url)
            for entry in entries
            if entry.status != "deleted" and (entry.ready or not ready_only) and (url := card_url(entry))
        ]
        read = await asyncio.gather(*(self._read(url) for _, url in wanted))
        return {
            "agents": [
                {"name": entry.name, "agentCard": url, **result}
                for (entry, url), result in zip(wanted, read, strict=True)
            ]
        }

    async def aclose(self) -> None:
        """Close the connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
