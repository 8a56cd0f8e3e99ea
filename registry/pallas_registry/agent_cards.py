"""The agents' own cards, read from them, at one URL of the registry.

- `GET /a2a/agent-cards`: the A2A Agent Cards (`agent_cards`). An A2A client (or a platform
  importing agents, as Ark's `A2AServer` does) reads one document instead of one card per agent.
  Each is read from the agent's card URL (its entry's `_meta["dev.pallas/agent"].a2a.agentCard`);
  agents that serve no A2A are left out.
- `GET /.well-known/mcp/catalog.json`: the MCP Catalog of every agent's MCP Server Card
  (SEP-2127, a draft; `ServerCards`), each read from `<the entry's remote URL>/server-card`.

Cards are kept `CARD_TTL` seconds, so a document says exactly what each agent serves. An agent
whose card cannot be read is listed with the error instead of a card; deleted agents are left
out. `?ready=true` keeps the agents ready now.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx2

from pallas_api import names
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


def server_card_url(entry: Entry) -> str | None:
    """The entry's MCP Server Card URL: beside its (first) remote's MCP URL."""
    remotes = entry.document.get("server", {}).get("remotes") or []
    url = remotes[0].get("url") if remotes and isinstance(remotes[0], Mapping) else None
    return names.server_card_url(url) if isinstance(url, str) else None


class CardReader:
    """Reads and caches one kind of card of the catalogue's agents.

    Args:
        url_of: The card URL of an entry, None when the agent serves no such card.
        accept: The `Accept` header of a read.
        list_key: The document's list (`agents`, `servers`).
        url_key: The name of each item's card URL (`agentCard`, `serverCard`).
    """

    def __init__(
        self, url_of: Callable[[Entry], str | None], accept: str, list_key: str, url_key: str
    ) -> None:
        self._url_of = url_of
        self._accept = accept
        self._list_key = list_key
        self._url_key = url_key
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}
        self._client: httpx2.AsyncClient | None = None

    async def _read(self, url: str) -> dict[str, Any]:
        cached = self._cache.get(url)
        if cached is not None and time.monotonic() - cached[0] < CARD_TTL:
            return cached[1]
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=CARD_TIMEOUT)
        try:
            response = await self._client.get(url, headers={"Accept": self._accept})
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
        """`{<list_key>: [{"name", <url_key>, "card" | "error"}]}` for the listed entries."""
        wanted = [
            (entry, url)
            for entry in entries
            if entry.status != "deleted" and (entry.ready or not ready_only) and (url := self._url_of(entry))
        ]
        read = await asyncio.gather(*(self._read(url) for _, url in wanted))
        return {
            self._list_key: [
                {"name": entry.name, self._url_key: url, **result}
                for (entry, url), result in zip(wanted, read, strict=True)
            ]
        }

    async def aclose(self) -> None:
        """Close the connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def agent_cards() -> CardReader:
    """The reader of the agents' A2A Agent Cards (`/a2a/agent-cards`)."""
    return CardReader(card_url, "application/json", "agents", "agentCard")


def server_cards() -> CardReader:
    """The reader of the agents' MCP Server Cards (the MCP Catalog)."""
    accept = f"{names.SERVER_CARD_MEDIA_TYPE}, application/json"
    return CardReader(server_card_url, accept, "servers", "serverCard")
