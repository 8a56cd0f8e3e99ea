"""In-memory stand-ins for an LLM provider and tool sources, for unit tests of the loop and health."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pallas_api.config import ModelOption
from pallas_api.fields import RequestParams
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.downstream.source import (
    DownstreamError,
    Onward,
    ProbeResult,
    ProgressHandler,
    RemoteTool,
    ToolOutcome,
)
from pallas_runtime.llm.provider import LLMError, ProviderCheck
from pallas_runtime.messages import Completion, Message, TextPart, TextSink, ToolCall, ToolSpec, Usage


@dataclass
class ScriptedProvider:
    """Answers each complete() with the next scripted Completion (or raises a scripted LLMError)."""

    script: list[Completion | LLMError]
    check: ProviderCheck = field(default_factory=lambda: ProviderCheck(True, "", time.monotonic()))
    calls: list[tuple[str, list[Message], list[ToolSpec]]] = field(default_factory=list)
    params: list[RequestParams | None] = field(default_factory=list)
    preflights: int = 0
    hang: asyncio.Event | None = None  # when set to an Event, preflight waits for it
    chosen: list[str] = field(default_factory=list)
    """The models `with_model` was asked for."""
    keys: list[str] = field(default_factory=list)
    """The keys `with_key` was given."""
    streams: bool = True
    """Whether a complete() with `on_text` streams its text, word by word (a provider that
    streams); False: as a provider that does not."""
    release: asyncio.Event | None = None
    """When set to an Event, each complete() waits for it before it answers (a turn held open)."""
    started: asyncio.Event = field(default_factory=asyncio.Event)
    """Set as soon as a complete() begins."""

    @property
    def name(self) -> str:
        return "fake"

    @property
    def model(self) -> str:
        return "m"

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        params: RequestParams | None = None,
        on_text: TextSink | None = None,
    ) -> Completion:
        self.started.set()
        if self.release is not None:
            await self.release.wait()
        self.calls.append((system, list(messages), list(tools)))
        self.params.append(params)
        step = self.script.pop(0) if self.script else Completion("(script exhausted)")
        if isinstance(step, LLMError):
            raise step
        if on_text is not None and self.streams and step.text:
            for i, word in enumerate(step.text.split(" ")):  # word by word, as a provider's stream
                await on_text(word if i == 0 else f" {word}")
        return step

    def with_model(self, option: ModelOption) -> ScriptedProvider:
        self.chosen.append(option.model)
        return self

    def with_key(self, key: str) -> ScriptedProvider:
        self.keys.append(key)
        return self

    def check_params(self, params: RequestParams) -> None:
        return None

    async def preflight(self) -> ProviderCheck:
        self.preflights += 1
        if self.hang is not None:
            await self.hang.wait()
        return self.check

    async def aclose(self) -> None:
        return None


Handler = Callable[[str, dict[str, Any], str | None, ProgressHandler | None], Awaitable[ToolOutcome]]


async def echo(
    tool: str, arguments: dict[str, Any], auth: str | None, progress: ProgressHandler | None
) -> ToolOutcome:
    if progress is not None:
        await progress(0.5, 1, "halfway")
    return ToolOutcome((TextPart(f"{tool}:{sorted(arguments.items())}:{auth}"),))


@dataclass
class FakeSource:
    name: str
    tools: list[str]
    handler: Handler = echo
    probe_result: ProbeResult | None = None
    list_error: Exception | None = None
    calls: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)
    conversations: list[ConversationKey | None] = field(default_factory=list)
    released: list[ConversationKey] = field(default_factory=list)

    async def list_tools(self, *, inbound_auth: str | None = None) -> list[RemoteTool]:
        if self.list_error is not None:
            raise self.list_error
        return [RemoteTool(self.name, t, f"the {t} tool", {"type": "object"}) for t in self.tools]

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        onward: Onward,
    ) -> ToolOutcome:
        self.calls.append((tool, arguments, onward.credential))
        self.conversations.append(onward.conversation)
        return await self.handler(tool, arguments, onward.credential, onward.on_progress)

    async def release(self, conversation: ConversationKey) -> None:
        self.released.append(conversation)

    async def probe(self) -> ProbeResult:
        await asyncio.sleep(0)
        return self.probe_result or ProbeResult(self.name, True)

    async def aclose(self) -> None:
        return None


def calls(*names: str, args: str = "{}") -> Completion:
    """A completion asking for tool calls by name (arguments parsed as in the adapters)."""
    return Completion(
        "",
        tuple(ToolCall(f"id{i}", n, {} if args == "{}" else {"q": args}) for i, n in enumerate(names)),
        Usage(input=10, output=2),
    )


def text(answer: str) -> Completion:
    return Completion(answer, (), Usage(input=20, output=5, cache_read=3, reasoning=1))


async def failing(
    tool: str, arguments: dict[str, Any], auth: str | None, progress: ProgressHandler | None
) -> ToolOutcome:
    raise DownstreamError(f"argos: calling {tool} failed: connection refused")
