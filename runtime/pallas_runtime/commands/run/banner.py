"""What `pallas run` says once its servers listen: a table for a person, lines for a program.

On a terminal (console log format) it waits until everything listens, asks each agent for its
`get_health` (as the registry does, with the same bearer) and prints one table of agents, URLs
and health to stdout. Elsewhere it prints `agent NAME  URL` lines to stdout as each server
starts (what scripts read) and logs a JSON line for each.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

log = logging.getLogger("pallas.run")
HEALTH_BUDGET = 5.0
"""Seconds the table waits for the agents' `get_health`, all asked at once."""
_STYLES = {"ok": "green", "degraded": "yellow", "error": "bold red"}


@dataclass(frozen=True, slots=True)
class Served:
    """One server `pallas run` started."""

    kind: str
    """`agent`, `registry` or `stdio server`."""
    name: str
    url: str


@dataclass(frozen=True, slots=True)
class Health:
    """What an agent's `get_health` said (or why it could not be asked)."""

    status: str
    message: str = ""


class StartupReport:
    """Says where the servers of one `pallas run` are, in the form its output wants."""

    def __init__(self, *, table: bool, stream: TextIO | None = None) -> None:
        """`table`: a person reads the output (console log format); else plain lines."""
        self._table = table
        self._stream = stream or sys.stdout
        self._served: list[Served] = []

    def started(self, kind: str, name: str, url: str) -> None:
        """A server listens now."""
        served = Served(kind, name, url)
        self._served.append(served)
        if self._table:
            return
        label = f"{kind} {name}" if name else kind
        print(f"{label:<30} {url}", file=self._stream, flush=True)
        about = {"agent": name} if kind == "agent" else {"server": name} if name else {}
        log.info("%s serving on %s", label, url, extra={"url": url, **about})

    async def ready(self, headers: Mapping[str, str]) -> None:
        """Everything listens: on a terminal, show the table with each agent's health."""
        if not self._table:
            return
        agents = [s for s in self._served if s.kind == "agent"]
        health = await asyncio.gather(*(agent_health(a.url, headers) for a in agents))
        by_name = dict(zip((a.name for a in agents), health, strict=True))
        Console(file=self._stream).print(startup_table(self._served, by_name))


async def agent_health(url: str, headers: Mapping[str, str]) -> Health:
    """The agent's `get_health`, as the registry of `pallas run` reads it."""
    # Imported here, as run.py imports the registry: `pallas run --agent` never needs it otherwise.
    from pallas_registry.static import probe_agent

    seen = await probe_agent(url, HEALTH_BUDGET, headers)
    return Health(seen.health.status, seen.health.message)


def startup_table(served: list[Served], health: Mapping[str, Health]) -> Group:
    """Agents in start order, then the registry: name, URL, health; below, what is wrong."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("URL", style="cyan", no_wrap=True)
    table.add_column("health", no_wrap=True)
    problems: list[Text] = []
    for server in served:
        name = Text.assemble((server.kind, "dim"), " ", (server.name, "bold"))
        seen = health.get(server.name) if server.kind == "agent" else None
        if seen is None:
            table.add_row(name, server.url, Text("serving", style="dim"))
            continue
        table.add_row(name, server.url, Text(seen.status, style=_STYLES.get(seen.status, "")))
        if seen.message:
            problems.append(Text.assemble((f"{server.name}: ", "bold"), seen.message))
    return Group(table, *([Text(), *problems] if problems else []))
