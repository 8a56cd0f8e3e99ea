"""`build_server(config)`: one agent as a Streamable-HTTP MCP server (docs/api.md §3).

The FastMCP server carries the `send_message` and `get_health` tools, the `<agent>_history`
prompt and the `/healthz`, `/readyz` and `/metrics` routes. Building it does no I/O; the
lifespan (run by the HTTP app or an in-memory client) starts the provider preflight and closes
the provider and downstream connections on exit. Providers and sources can be passed in, which
is how `pallas run` and benchmarks share process-wide pieces.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.prompts import Message as PromptMessage
from fastmcp.server.dependencies import get_http_headers
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import ToolResult
from mcp_types import CallToolRequestParams, ImageContent
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp

from pallas_api.config import AgentConfig
from pallas_runtime import __version__
from pallas_runtime.agent.conversation import ConversationStore
from pallas_runtime.agent.health import HealthChecker
from pallas_runtime.agent.inputs import ImageInput, InvalidInput, user_message
from pallas_runtime.agent.loop import AgentLoop, MaxIterationsExceeded
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.downstream.source import ToolSource
from pallas_runtime.downstream.sources import build_sources
from pallas_runtime.llm.factory import create_provider
from pallas_runtime.llm.provider import LLMError, LLMProvider
from pallas_runtime.messages import AssistantMessage, ImagePart, TextPart, UserMessage
from pallas_runtime.metrics import CONTENT_TYPE, RuntimeMetrics

log = logging.getLogger("pallas.server")

SEND_MESSAGE_DESCRIPTION = (
    "Send a message (optionally with images) to this agent and get its answer. Pass the same "
    "conversation_id to continue a conversation; within one MCP session the session is the conversation."
)
GET_HEALTH_DESCRIPTION = "Returns the health status of this agent and its downstream dependencies."


class _SendMessageMetrics(Middleware):
    """Counts every send_message outcome, including calls refused before the tool body runs."""

    def __init__(self, agent: str, metrics: RuntimeMetrics) -> None:
        self._agent = agent
        self._metrics = metrics

    async def on_call_tool(
        self,
        context: MiddlewareContext[CallToolRequestParams],
        call_next: CallNext[CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        if context.message.name != "send_message":
            return await call_next(context)
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await call_next(context)
            if not getattr(result, "is_error", False):
                outcome = "ok"
            return result
        finally:
            self._metrics.send_message_total.labels(self._agent, outcome).inc()
            self._metrics.send_message_duration.labels(self._agent).observe(time.perf_counter() - started)


def _progress_sender(ctx: Context) -> Any:
    meta = ctx.request_context.meta if ctx.request_context is not None else None
    if not meta or meta.get("progressToken") is None:
        return None
    return ctx.report_progress


def _conversation_key(conversation_id: str | None) -> str | None:
    if conversation_id:
        return f"id:{conversation_id}"
    session = get_http_headers(include={"mcp-session-id"}).get("mcp-session-id")
    return f"session:{session}" if session else None


def _history_messages(messages: Sequence[Any]) -> list[PromptMessage]:
    rendered: list[PromptMessage] = []
    for message in messages:
        if isinstance(message, UserMessage):
            for part in message.content:
                if isinstance(part, TextPart):
                    rendered.append(PromptMessage(part.text, role="user"))
                elif isinstance(part, ImagePart):
                    image = ImageContent(type="image", data=part.data, mime_type=part.mime_type)
                    rendered.append(PromptMessage(image, role="user"))
        elif isinstance(message, AssistantMessage) and message.text:
            rendered.append(PromptMessage(message.text, role="assistant"))
    return rendered


def build_server(
    config: AgentConfig,
    *,
    metrics: RuntimeMetrics | None = None,
    provider: LLMProvider | None = None,
    sources: Sequence[ToolSource] | None = None,
    environ: Mapping[str, str] | None = None,
) -> FastMCP:
    """The agent's MCP server. Serve it with `server.http_app(path="/mcp")`.

    Args:
        config: The agent's configuration.
        metrics: Process-wide metrics; a new registry by default.
        provider: The LLM provider; built from config and environment by default.
        sources: Downstream servers and peer agents; built from config by default.
        environ: Environment for secret env vars (API key, headers); the process's by default.
    """
    metrics = metrics or RuntimeMetrics()
    provider = provider or create_provider(config, environ)
    sources = list(sources) if sources is not None else build_sources(config, environ)
    conversations = ConversationStore(config.history.max_conversations, config.history.max_messages)
    loop = AgentLoop(config, provider, sources, metrics)
    health = HealthChecker(config, provider, sources, metrics, environ)
    state = {"ready": False}
    agent = config.name
    metrics.agent_info.labels(agent, config.model).set(1)
    metrics.active_conversations.labels(agent).set(0)
    # Both outcome series exist from the start, so rate() sees the first error of a new agent.
    for outcome in ("ok", "error"):
        metrics.send_message_total.labels(agent, outcome)

    async def preflight() -> None:
        check = await health.check_provider()
        if not check.ok:  # warn-only: the agent serves, get_health reports it
            log.warning("LLM provider preflight failed: %s", check.message)

    @asynccontextmanager
    async def lifespan(_: FastMCP) -> AsyncIterator[dict[str, Any]]:
        task = asyncio.create_task(preflight())
        state["ready"] = True
        try:
            yield {}
        finally:
            state["ready"] = False
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await asyncio.gather(provider.aclose(), *(s.aclose() for s in sources), return_exceptions=True)

    server = FastMCP(
        agent,
        instructions=config.description or None,
        version=config.version,
        lifespan=lifespan,
        middleware=[_SendMessageMetrics(agent, metrics)],
        mask_error_details=True,
    )

    @server.tool(name="send_message", description=SEND_MESSAGE_DESCRIPTION, output_schema=None)
    async def send_message(
        message: str,
        ctx: Context,
        images: list[ImageInput] | None = None,
        conversation_id: str | None = None,
    ) -> str:
        try:
            user = user_message(config, message, images)
        except InvalidInput as exc:
            raise ToolError(str(exc)) from None
        inbound_auth = get_http_headers(include={"authorization"}).get("authorization")
        progress = ProgressReporter(agent, _progress_sender(ctx))
        key = _conversation_key(conversation_id)
        try:
            if key is None:
                return (await loop.run([], user, inbound_auth=inbound_auth, progress=progress)).text
            conversation = conversations.open(key)
            async with conversation.lock:
                try:
                    turn = await loop.run(
                        list(conversation.messages), user, inbound_auth=inbound_auth, progress=progress
                    )
                except BaseException:
                    if not conversation.messages:  # a failed first turn leaves nothing behind
                        conversations.discard(conversation)
                    raise
                conversations.extend(conversation, turn.messages)
            metrics.active_conversations.labels(agent).set(len(conversations))
            return turn.text
        except LLMError as exc:
            raise ToolError(f"the language model call failed: {exc}") from None
        except MaxIterationsExceeded as exc:
            raise ToolError(str(exc)) from None

    @server.tool(
        name="get_health",
        description=GET_HEALTH_DESCRIPTION,
        output_schema=None,
        annotations={"readOnlyHint": True, "idempotentHint": True},
    )
    async def get_health() -> str:
        return (await health.report()).to_json()

    @server.prompt(
        name=f"{agent}_history",
        description=f"The stored conversation with {config.display_title}, as MCP messages.",
    )
    def history(conversation_id: str | None = None) -> list[PromptMessage]:
        key = _conversation_key(conversation_id)
        if key is None:
            raise ValueError(
                "no conversation: pass conversation_id, or ask within the MCP session you chatted in"
            )
        conversation = conversations.get(key)
        if conversation is None:
            what = f"conversation_id {conversation_id!r}" if conversation_id else "this MCP session"
            raise ValueError(f"no stored conversation for {what}")
        return _history_messages(conversation.messages)

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "alive", "version": __version__})

    @server.custom_route("/readyz", methods=["GET"])
    async def readyz(_: Request) -> Response:
        if state["ready"]:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "starting"}, status_code=503)

    @server.custom_route("/metrics", methods=["GET"])
    async def metrics_route(_: Request) -> Response:
        return PlainTextResponse(metrics.exposition(), media_type=CONTENT_TYPE)

    return server


def agent_app(server: FastMCP, allowed_hosts: Sequence[str] = ()) -> ASGIApp:
    """The agent's HTTP app: MCP at /mcp plus the probe and metrics routes.

    DNS-rebinding protection is explicit: fastmcp 4.1.2's setting defaults to off. In "auto"
    mode it checks Host and Origin for servers bound to loopback (all of `pallas run`); listed
    hosts turn the check on for any bind address (e.g. the Service DNS names of a pod), and the
    server's own address is always accepted, so probes and scrapes by pod IP still work.
    """
    return server.http_app(
        path="/mcp", host_origin_protection="auto", allowed_hosts=list(allowed_hosts) or None
    )


def secret_env_names(config: AgentConfig) -> list[str]:
    """Environment variables of `config` that hold secrets (redacted from logs)."""
    names = [config.provider.api_key_env] if config.provider.api_key_env else []
    names += [h.value_from_env for s in config.servers for h in s.headers if h.value_from_env]
    return names
