"""A provider whose SDK is imported after the agent says ready, not before (issue 53, item 4).

A provider SDK is the largest import of an agent's start (`import openai` loads every type of the
API: about 1.6 s of a 4.6 s start on a loaded 2-core machine, 13 MB), yet no request but a turn
needs it: MCP `initialize`, `tools/list`, `get_health`, the probes and the Agent Card answer
without it. `DeferredProvider` stands in for the agent's provider: the lifespan marks the agent
ready first and then loads the SDK in a thread (`load`), and a turn that comes before it is
loaded awaits the same load (`loaded`), so a woken agent answers its first message as soon as the
SDK is in, never later than before. The module is imported in a thread (imports hold the GIL only
in turns, so the loop keeps answering); the adapter is built on the loop, as before.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from pallas_api.config import AgentConfig, ModelOption
from pallas_api.fields import RequestParams
from pallas_runtime.llm.provider import LLMProvider, ProviderCheck
from pallas_runtime.messages import Completion


class LoadOnce:
    """An async job run at most once, shared by concurrent callers.

    One caller's cancellation does not stop it for the others (`DeferredProvider`,
    `server.deferred_a2a.DeferredA2A`).
    """

    def __init__(self, job: Callable[[], Awaitable[None]]) -> None:
        self._job = job
        self._task: asyncio.Task[None] | None = None

    async def __call__(self) -> None:
        """Run the job, or wait for the run under way or done."""
        if self._task is not None and self._task.done():
            # Every turn and every model call passes here: after the load, no shield, no await.
            self._task.result()
            return
        if self._task is None:
            self._task = asyncio.ensure_future(self._job())
        await asyncio.shield(self._task)

    def cancel(self) -> None:
        """Cancel the job if it is under way (on close)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()


class DeferredProvider:
    """`build()`'s provider, built at first use; `module` is imported in a thread before that."""

    def __init__(self, config: AgentConfig, module: str, build: Callable[[], LLMProvider]) -> None:
        self.name = config.provider.name
        self.model = config.model
        self._module = module
        self._build = build
        self._real: LLMProvider | None = None
        self.load = LoadOnce(self._import)
        """Import the SDK in a thread and build the adapter (awaited by the preflight and turns)."""

    async def _import(self) -> None:
        await asyncio.to_thread(importlib.import_module, self._module)
        self._ensure()

    def _ensure(self) -> LLMProvider:
        # Synchronous callers before a load (a test's in-memory client) import on the spot.
        if self._real is None:
            self._real = self._build()
        return self._real

    def complete(self, **call: Any) -> Coroutine[Any, Any, Completion]:
        """The adapter's `complete`, once loaded.

        Not a coroutine of its own: once the adapter is built (the SDK is in: building imports
        it), a model call is the adapter's coroutine itself, no frame or load check more per call.
        """
        if self._real is not None:
            return self._real.complete(**call)
        return self._complete_after_load(**call)

    async def _complete_after_load(self, **call: Any) -> Completion:
        await self.load()
        return await self._ensure().complete(**call)

    def with_model(self, option: ModelOption) -> LLMProvider:
        """The adapter's `with_model` (a turn awaits `loaded` before choosing its model)."""
        return self._ensure().with_model(option)

    def with_key(self, key: str) -> LLMProvider:
        """The adapter's `with_key` (a turn awaits `loaded` before choosing its key)."""
        return self._ensure().with_key(key)

    def check_params(self, params: RequestParams) -> None:
        """The adapter's `check_params`."""
        self._ensure().check_params(params)

    async def preflight(self) -> ProviderCheck:
        """The adapter's preflight, once loaded."""
        await self.load()
        return await self._ensure().preflight()

    async def aclose(self) -> None:
        """Close the adapter if it was built; a load under way is cancelled."""
        self.load.cancel()
        if self._real is not None:
            await self._real.aclose()


async def loaded(provider: LLMProvider) -> None:
    """Wait until `provider`'s SDK is in, when it is a `DeferredProvider`; no-op otherwise."""
    if isinstance(provider, DeferredProvider):
        await provider.load()
