"""The agent's tools: what its sources offer, and one way to call one under the agent's policy.

Every call to a downstream tool goes through `ToolBox.call`, whether the model named the tool
directly (`<server>__<tool>`), through the gateway's `execute_tool`, or a client of the agent
called `execute_tool` on the agent's MCP surface: the tool policy is enforced again at the
call (a denied tool gets an error result and counts in `pallas_tool_denied_total`), a tool its
server's `requireApproval` marks waits for the caller's yes (`agent.approvals`), one audit
line is written, the call is timed and counted, and the result is scrubbed of the agent's own
secret values and cut to `limits.maxToolResultBytes` before anyone sees it. A server that echoes
the headers it received would otherwise hand the model, its provider and the conversation the
keys the agent holds (the same values the logs redact).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pallas_api.config import AgentConfig
from pallas_api.errors import ErrorCode
from pallas_io.logs import SecretValues
from pallas_io.tracing import exemplar
from pallas_runtime.agent.approvals import ApprovalGate
from pallas_runtime.agent.audit import Outcome, audit_tool_call
from pallas_runtime.agent.latency import Latencies
from pallas_runtime.agent.progress import ToolCallChunk
from pallas_runtime.agent.trace import result_text
from pallas_runtime.agent.turn import Turn
from pallas_runtime.agent.window import OVERHEAD_TOKENS, text_tokens
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.downstream.source import (
    DownstreamError,
    DownstreamTimeout,
    ProgressHandler,
    RemoteTool,
    ToolOutcome,
    ToolSource,
)
from pallas_runtime.edge.credential import credential_values
from pallas_runtime.messages import ContentPart, TextPart
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.sizes import cut_to
from pallas_runtime.tracing import tool_finished, tool_span

log = logging.getLogger("pallas.agent")

_LLM_NAME = re.compile(r"[^A-Za-z0-9_-]")
_LLM_NAME_MAX = 64  # OpenAI's limit on function names; Anthropic's is the same
MAX_REMEMBERED_NAMES = 100_000


def llm_tool_name(qualified: str) -> str:
    """A name every provider accepts (`[A-Za-z0-9_-]{1,64}`), stable for a given tool."""
    name = _LLM_NAME.sub("_", qualified)
    if len(name) <= _LLM_NAME_MAX and name == qualified:
        return name
    digest = hashlib.sha256(qualified.encode()).hexdigest()[:8]
    return f"{name[: _LLM_NAME_MAX - 9]}_{digest}"


@dataclass(frozen=True, slots=True)
class OfferedTool:
    """A tool as offered to the model, and where calls to it go."""

    source: ToolSource
    tool: RemoteTool
    allowed: bool
    peer: bool = False
    """Whether the source is a peer agent (offered directly in every exposure mode)."""
    schema_tokens: int = 0
    """The estimated tokens the tool's definition takes in a request (`agent/window.py`)."""


def _error(text: str, code: ErrorCode) -> ToolOutcome:
    return ToolOutcome((TextPart(text),), is_error=True, code=code)


class ToolBox:
    """The tools of one agent's sources, listed and called under its policy."""

    def __init__(
        self,
        config: AgentConfig,
        sources: Sequence[ToolSource],
        metrics: RuntimeMetrics,
        secrets: SecretValues | None = None,
        latencies: Latencies | None = None,
    ) -> None:
        self._config = config
        self._latencies = latencies or Latencies()
        self._sources = list(sources)
        self._peers = frozenset(a.name for a in config.agents)
        self._metrics = metrics
        self._secrets = secrets or SecretValues()
        self._approvals = ApprovalGate(config)
        self._tokens: dict[int, tuple[RemoteTool, int]] = {}
        """id of a listed tool → (the tool, its schema's tokens): a source keeps its tool objects
        until its list changes, and `auto` weighs every schema on every turn."""
        self._names: dict[str, tuple[str, bool]] = {}
        """qualified name → (model-facing name, allowed): both fixed for the config's life, and
        a regex and the policy's globs over hundreds of tools would cost every turn milliseconds."""

    def _weigh(self, tool: RemoteTool) -> int:
        known = self._tokens.get(id(tool))
        if known is None or known[0] is not tool:
            if len(self._tokens) > MAX_REMEMBERED_NAMES:
                self._tokens.clear()
            definition = json.dumps([tool.qualified_name, tool.description, tool.input_schema])
            known = self._tokens[id(tool)] = (tool, text_tokens(definition) + OVERHEAD_TOKENS)
        return known[1]

    def _named(self, qualified: str) -> tuple[str, bool]:
        known = self._names.get(qualified)
        if known is None:
            if len(self._names) > MAX_REMEMBERED_NAMES:
                self._names.clear()
            known = self._names[qualified] = (llm_tool_name(qualified), self._config.tools.permits(qualified))
        return known

    @property
    def server_names(self) -> list[str]:
        """The downstream MCP servers (not peer agents), in the config's order."""
        return [s.name for s in self._sources if s.name not in self._peers]

    async def offered(self, inbound_auth: str | None = None) -> dict[str, OfferedTool]:
        """Every tool of every reachable source by its model-facing name, denied ones flagged.

        A source that cannot list its tools is left out of this turn (and logged); the model
        still works with the others.
        """
        listings = await asyncio.gather(
            *(s.list_tools(inbound_auth=inbound_auth) for s in self._sources), return_exceptions=True
        )
        offered: dict[str, OfferedTool] = {}
        for source, listing in zip(self._sources, listings, strict=True):
            if isinstance(listing, BaseException):
                log.warning("tools of %s unavailable this turn: %s", source.name, listing)
                continue
            peer = source.name in self._peers
            for tool in listing:
                name, allowed = self._named(tool.qualified_name)
                if name in offered:
                    log.warning("tool name %s is ambiguous; keeping the first", tool.qualified_name)
                    continue
                offered[name] = OfferedTool(source, tool, allowed, peer, self._weigh(tool))
        return offered

    async def release(self, conversation: ConversationKey) -> None:
        """The conversation ended: every source drops what it holds for it (stateful sessions)."""
        await asyncio.gather(*(s.release(conversation) for s in self._sources), return_exceptions=True)

    def deny(self, source: str, tool: str, shown: str) -> ToolOutcome:
        """Refuse a call the policy does not permit: counted, audited, coded.

        `shown` is the name the caller used for the tool.
        """
        self._metrics.tool_denied_total.labels(self._config.name, source).inc()
        refused = ErrorCode.DENIED_BY_POLICY
        audit_tool_call(self._config.name, source, tool, "DENY", 0.0, "not allowed by spec.tools", refused)
        return _error(f"tool {shown!r} is not allowed for this agent", refused)

    def unknown(self, name: str, available: str) -> ToolOutcome:
        """Refuse a call to a tool no source offers: audited, coded, with what there is."""
        audit_tool_call(self._config.name, "", name, "DENY", 0.0, "unknown tool", ErrorCode.TOOL_NOT_FOUND)
        return _error(
            f"unknown tool {name!r}; available tools: {available or 'none'}", ErrorCode.TOOL_NOT_FOUND
        )

    async def call(
        self,
        entry: OfferedTool,
        arguments: dict[str, Any],
        turn: Turn,
        *,
        time_limit: float | None = None,
        shown: str | None = None,
        call_id: str | None = None,
    ) -> ToolOutcome:
        """Call one offered tool for `turn`: policy, audit, metrics, progress; the result scrubbed and cut.

        `shown` is the name the caller used for the tool (the model's, default `<server>__<tool>`);
        `call_id` the model's id of the call (both name the call in progress chunks).

        `time_limit` (seconds) bounds this call below the source's own timeout (`execute_tool`'s
        `timeout_ms`); running out is a TIMEOUT error result, as the source's own would be.
        """
        agent, source, tool = self._config.name, entry.source.name, entry.tool
        if not (entry.allowed and self._config.tools.permits(tool.qualified_name)):
            return self.deny(source, tool.name, shown or tool.qualified_name)
        progress = turn.progress
        if (refused := await self._approvals.check(tool, arguments, progress, turn.approver)) is not None:
            return refused  # the caller rejected it, or nobody could be asked in time (audited)
        # The caller's own credential is a secret of this call: a server it is forwarded to (or
        # one that got it some other way) may echo it, and it must reach neither the model, the
        # stored history, the answer nor the spans.
        secrets = self._secrets.including(credential_values(turn.credential))
        chunk = ToolCallChunk(call_id, shown or tool.qualified_name, arguments)
        await progress.tool_started(source, tool.name, chunk)
        with tool_span(
            agent, source, tool.name, peer=entry.peer, arguments=arguments, secrets=secrets
        ) as span:
            started = time.perf_counter()
            timed_out = False
            relay = progress.relay(source, tool.name)
            try:
                call = entry.source.call_tool(tool.name, arguments, turn.onward(_scrubbed(relay, secrets)))
                outcome = await (asyncio.wait_for(call, time_limit) if time_limit is not None else call)
            except TimeoutError:
                timed_out = True
                outcome = _error(
                    f"{tool.qualified_name} did not answer within {time_limit:g}s "
                    "(execute_tool's timeout_ms)",
                    ErrorCode.TIMEOUT,
                )
            except DownstreamError as exc:
                timed_out = isinstance(exc, DownstreamTimeout)
                outcome = ToolOutcome((TextPart(str(exc)),), is_error=True, code=exc.code)
            except Exception:
                log.exception("calling %s failed unexpectedly", tool.qualified_name)
                outcome = ToolOutcome(
                    (TextPart(f"calling {tool.qualified_name} failed (see agent logs)"),), True
                )
            elapsed = time.perf_counter() - started
            verdict: Outcome = "TIMEOUT" if timed_out else "ERROR" if outcome.is_error else "ALLOW"
            code = outcome.code if outcome.is_error else None
            # Inside the span: the audit line and the histogram's exemplar carry its trace id.
            audit_tool_call(agent, source, tool.name, verdict, elapsed, code=code)
            tool_finished(span, verdict, code.value if code is not None else None)
            self._metrics.tool_call_duration.labels(agent, source, "tool").observe(elapsed, exemplar())
        self._latencies.record(source, elapsed)
        self._metrics.tool_calls_total.labels(
            agent, source, "tool", "error" if outcome.is_error else "ok"
        ).inc()
        kept = self._within_budget(outcome, tool.qualified_name, secrets)
        await progress.tool_finished(
            source, tool.name, ok=not outcome.is_error, call=chunk, result=result_text(kept)
        )
        return replace(outcome, content=kept)

    def _within_budget(
        self, outcome: ToolOutcome, qualified: str, secrets: SecretValues
    ) -> tuple[ContentPart, ...]:
        """The result as the model gets it: texts scrubbed of secrets, then cut to size.

        Scrubbed first, so no part of a secret survives the cut to `limits.maxToolResultBytes`.
        """
        limit = self._config.limits.max_tool_result_bytes
        scrub = secrets.scrub
        return tuple(
            TextPart(cut_to(scrub(p.text), limit, f"result of {qualified}")) if isinstance(p, TextPart) else p
            for p in outcome.content
        )


def _scrubbed(relay: ProgressHandler | None, secrets: SecretValues) -> ProgressHandler | None:
    """A downstream call's progress relay whose messages are scrubbed of `secrets`."""
    if relay is None or not secrets:
        return relay
    scrub = secrets.scrub

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        await relay(progress, total, scrub(message) if message else message)

    return forward
