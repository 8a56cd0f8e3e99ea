"""One stdio server kept alive: a link and an MCP session over it, both opened again when it ends.

A stdio server speaks to exactly one client, so the bridge holds one MCP session per server life
and every HTTP caller's request travels on it (a stateful server gets a server per HTTP session
instead: `bridge`). When the server ends (it crashed, or closed its output), the session goes,
the log says how (`exited with code 1`), and after a back-off (1 s, doubled after each life
shorter than `STEADY_SECONDS`, at most 60 s; a steady 1 s for a pod's FIFOs, whose container the
kubelet restarts with its own) the server is started again. Requests arriving meanwhile wait for
the next session, within their own deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import anyio
import mcp_types
from mcp import ClientSession

from pallas_io.backoff import backoff
from pallas_io.probe import leaf_exceptions
from pallas_runtime import __version__
from pallas_runtime.stdio.lines import framed
from pallas_runtime.stdio.links import Link, Pipes

log = logging.getLogger("pallas.stdio")

INITIALIZE_TIMEOUT = 60.0
"""How long a new server may take to answer `initialize` (`npx -y` may download it first)."""
FIRST_DELAY = 1.0
MAX_DELAY = 60.0
STEADY_SECONDS = 60.0
"""A server that ran this long is restarted after `FIRST_DELAY` again."""
CLIENT_INFO = mcp_types.Implementation(name="pallas-bridge", version=__version__)


class ServerUnavailable(Exception):
    """The server has no session now (it is starting or restarting); the text says which."""


class RelayingSession(ClientSession):
    """The bridge's session with the server: tool results are relayed, not checked.

    A client validates a result's `structuredContent` against the tool's output schema; a bridge
    passes results on as they came, and the agent behind it judges them (as fastmcp's proxy does).
    """

    async def validate_tool_result(self, name: str, result: mcp_types.CallToolResult) -> None:
        """Accept every result: the bridge relays."""
        del name, result


class StdioServer:
    """A stdio server, started on `start` and kept running until `aclose`."""

    def __init__(self, name: str, link: Link) -> None:
        self.name = name
        self._link = link
        self._session: ClientSession | None = None
        self._up = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self.restarts = 0
        """How many times the server was started again after it ended."""
        self.last_problem = "starting"
        """Why there is no session now, for `session()`'s callers and `/readyz`."""
        self._renewal: str | None = None
        self._renew = asyncio.Event()

    @property
    def ready(self) -> bool:
        """Whether a session is up now."""
        return self._session is not None

    def start(self) -> None:
        """Start the server and keep it running (idempotent)."""
        if self._runner is None:
            self._runner = asyncio.create_task(self._run(), name=f"stdio-{self.name}")

    async def session(self, wait: float) -> ClientSession:
        """The server's session, waiting up to `wait` seconds for one.

        Raises:
            ServerUnavailable: no session within `wait` (the text says why).
        """
        self.start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._up.wait(), wait)
        if self._session is None:
            raise ServerUnavailable(f"stdio server {self.name} is not available: {self.last_problem}")
        return self._session

    def renew(self, why: str) -> None:
        """End the server's current life now; it starts again as after any end (`why` is logged).

        Over a pod's FIFOs the server sees its input end and exits, and the kubelet starts its
        container again: how a rotated secret reaches a hosted server (`commands.bridge`).
        """
        self._renewal = why
        self._renew.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0  # lives in a row that ended before `STEADY_SECONDS`
        while True:
            began = loop.time()
            ended = await self._live()
            if self._link.paced:
                if loop.time() - began >= STEADY_SECONDS:
                    failures = 0
                delay = backoff(failures, first=FIRST_DELAY, cap=MAX_DELAY)
                log.warning(
                    "%s: lost (%s); starting it again in %gs",
                    self.name,
                    ended,
                    delay,
                    extra={"server": self.name},
                )
                await asyncio.sleep(delay)
                failures += 1
            else:
                log.warning(
                    "%s: lost (%s); waiting for it again", self.name, ended, extra={"server": self.name}
                )
                await asyncio.sleep(FIRST_DELAY)  # never a busy loop, whatever fails
            self.restarts += 1

    async def _live(self) -> str:
        """One life of the server: open, initialize, serve until it ends; how it ended."""
        self.last_problem = "starting"
        how = ""
        opened: Pipes | None = None
        try:
            async with self._link.open() as pipes:
                opened = pipes
                async with (
                    framed(self.name, pipes.output, pipes.input) as link,
                    RelayingSession(link.read, link.write, client_info=CLIENT_INFO) as session,
                ):
                    with anyio.fail_after(INITIALIZE_TIMEOUT):
                        result = await session.initialize()
                    info = result.server_info
                    log.info(
                        "%s: connected (%s %s)",
                        self.name,
                        info.name,
                        info.version,
                        extra={"server": self.name},
                    )
                    self._session = session
                    self._up.set()
                    how = await self._until_ended(link.ended, lambda: link.why)
                    self._forget()
        except OSError as exc:
            how = f"cannot start it: {exc.strerror or type(exc).__name__}"
        except TimeoutError:
            how = f"no answer to initialize within {INITIALIZE_TIMEOUT:g}s"
        except Exception as exc:  # noqa: BLE001 - a server's failure must not end the bridge
            how = _described(exc)
        finally:
            self._forget()
        if opened is not None and opened.ended_how:
            how = f"{how}; {opened.ended_how}" if how else opened.ended_how
        self.last_problem = how
        return how

    async def _until_ended(self, ended: anyio.Event, why: Callable[[], str]) -> str:
        """Wait until the link ends or `renew` is called; how the life ended."""
        self._renew.clear()
        waits = [asyncio.ensure_future(ended.wait()), asyncio.ensure_future(self._renew.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if ended.is_set():
            return why()
        return f"ended by the bridge: {self._renewal}"

    def _forget(self) -> None:
        self._session = None
        self._up.clear()

    async def aclose(self) -> None:
        """Stop the server (its link closes it as the MCP spec says)."""
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
            self._runner = None


def _described(exc: BaseException) -> str:
    leaf = next(iter(leaf_exceptions(exc)), exc)
    text = str(leaf)
    return f"{type(leaf).__name__}: {text[:200]}" if text else type(leaf).__name__
