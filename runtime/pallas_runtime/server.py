"""`build_server(config)`: one agent as a Streamable-HTTP MCP server (docs/api.md §3).

The FastMCP server carries the `send_message` tool and its alias named after the agent (the
name the seeds' client snippets call), the `get_health` tool, the `<agent>_history` prompt and
the `/healthz`, `/readyz` and `/metrics` routes. Building it does no I/O; the lifespan (run by
the HTTP app or an in-memory client) starts the provider preflight and closes the provider and
downstream connections on exit. Providers and sources can be passed in, which
is how `pallas run` and benchmarks share process-wide pieces.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.exceptions import NotFoundError, PromptError, ToolError
from fastmcp.exceptions import ValidationError as ArgumentsInvalid
from fastmcp.prompts import Message as PromptMessage
from fastmcp.server.dependencies import get_http_headers
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import ToolResult
from mcp_types import CallToolRequestParams, ImageContent
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp

from pallas_api.config import AgentConfig, RequestParams, SessionLimits
from pallas_api.errors import ErrorCode, error_content
from pallas_api.health import utc_timestamp
from pallas_api.names import HISTORY_TRIMMED_META, INSTRUCTION_URI, TOOL_CALLS_META
from pallas_api.validation import describe
from pallas_io.logs import SecretValues
from pallas_runtime import __version__
from pallas_runtime.agent.health import HealthChecker
from pallas_runtime.agent.inputs import ImageInput, InvalidInput, user_message
from pallas_runtime.agent.loop import AgentLoop, MaxIterationsExceeded, ToolChoiceUnavailable
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.agent.trace import tool_activity, tool_trace
from pallas_runtime.agent.turns import Conversations, NoConversation, Reply
from pallas_runtime.auth import build_auth
from pallas_runtime.auth.credential import SingleCredential, forwarded_credential
from pallas_runtime.conversations.caller import checked_id, current_caller
from pallas_runtime.conversations.factory import build_store
from pallas_runtime.conversations.model import ConversationBusy, ConversationStore, StoreUnavailable, TurnLost
from pallas_runtime.downstream.call_path import CallPath, CallRefused
from pallas_runtime.downstream.source import ToolSource
from pallas_runtime.downstream.sources import build_sources
from pallas_runtime.inflight import InFlight, ShuttingDown
from pallas_runtime.llm.factory import create_provider
from pallas_runtime.llm.provider import LLMError, LLMProvider
from pallas_runtime.messages import AssistantMessage, ImagePart, TextPart, ToolResultsMessage, UserMessage
from pallas_runtime.metrics import AUTH_OUTCOMES, CONTENT_TYPE, RuntimeMetrics
from pallas_runtime.request_ids import OneRequestPerId
from pallas_runtime.request_limit import MAX_REQUEST_BYTES, RequestLimit
from pallas_runtime.sessions import serve_sessions

log = logging.getLogger("pallas.server")

SEND_MESSAGE_DESCRIPTION = (
    "Send a message (optionally with images) to this agent and get its answer. "
    "params (optional) overrides the agent's request parameters for this call; null clears one."
)
SCOPE_DESCRIPTIONS = {
    "caller": " Without conversation_id you continue your one default conversation with this agent, "
    "from any session. Pass another conversation_id to keep a separate conversation.",
    "session": " Without conversation_id the conversation is this MCP session's own; pass the same "
    "conversation_id to continue a conversation across sessions.",
    "request": " This agent keeps no conversations: every message starts afresh.",
}
SHARED_ID_WARNING = (
    " This agent does not identify its callers: a conversation_id is shared by everyone who knows it, "
    "so choose one nobody can guess."
)
SHARED_DEFAULT_WARNING = (
    " This agent does not identify its callers: every client continues the same conversation."
)
BUILT_IN_TOOLS = frozenset({"send_message", "get_health", "list_conversations", "delete_conversation"})
LIST_CONVERSATIONS_DESCRIPTION = (
    "Your conversations with this agent, most recent first: id, title (the start of the first "
    "message), last turn time and message count. Continue one by passing its id as conversation_id."
)
LIST_CONVERSATIONS_ANONYMOUS = (
    " This agent does not identify its callers, so it lists only the conversations this MCP session "
    "started or named."
)
DELETE_CONVERSATION_DESCRIPTION = "Delete one of your conversations with this agent, by id."
CONVERSATION_META = "pallas.dev/conversationId"
"""The `_meta` key of a send_message result naming the conversation the turn was stored in."""
GAUGE_REFRESH = 10.0
GET_HEALTH_DESCRIPTION = "Returns the health status of this agent and its downstream dependencies."


def send_message_description(config: AgentConfig) -> str:
    """What `send_message` says: who this agent is, then how to call it.

    An orchestrator offers a peer's `send_message` to its model under the peer's description,
    so the agent's title and description must be in it for that model to know what the peer is
    for (the generic text alone says nothing about it).
    """
    about = config.display_title
    if config.description:
        about += f": {config.description.rstrip('.')}."
    scope = config.conversation_scope
    text = f"{about} {SEND_MESSAGE_DESCRIPTION}{SCOPE_DESCRIPTIONS[scope]}"
    if config.auth.mode == "none" and scope != "request":
        text += SHARED_DEFAULT_WARNING if scope == "caller" else SHARED_ID_WARNING
    return text


def list_conversations_description(config: AgentConfig) -> str:
    """What `list_conversations` says, including what an anonymous client is shown."""
    if config.auth.mode == "none" and config.conversation_scope != "caller":
        return LIST_CONVERSATIONS_DESCRIPTION + LIST_CONVERSATIONS_ANONYMOUS
    return LIST_CONVERSATIONS_DESCRIPTION


def send_message_names(config: AgentConfig) -> tuple[str, ...]:
    """`send_message` and its alias `<agent>`, unless the name is taken by a built-in tool.

    Agent names are DNS labels, always valid MCP (and LLM function) tool names and never equal
    to a built-in (those have an underscore); the check guards against a future built-in.
    """
    if config.name in BUILT_IN_TOOLS:
        log.warning("agent %s: no alias tool: the name is a built-in tool's", config.name)
        return ("send_message",)
    return ("send_message", config.name)


class _SendMessageMetrics(Middleware):
    """Counts every send_message outcome (the alias's too), including calls refused early."""

    def __init__(self, agent: str, metrics: RuntimeMetrics, names: Sequence[str]) -> None:
        self._agent = agent
        self._metrics = metrics
        self._names = frozenset(names)

    async def on_call_tool(
        self,
        context: MiddlewareContext[CallToolRequestParams],
        call_next: CallNext[CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        if context.message.name not in self._names:
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


class CodedToolError(ToolError):
    """A tool error with its machine-readable code (see `pallas_api.errors`)."""

    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message, log_level=logging.DEBUG)
        self.code = code


def error_result(code: ErrorCode, text: str) -> ToolResult:
    """An error result: the text as content, `{"error": {"code", "message"}}` as structured content.

    A raised ToolError reaches the client as text alone; a returned result keeps the code.
    """
    return ToolResult(content=text, structured_content=error_content(code, text), is_error=True)


class _CodedErrors(Middleware):
    """Every error of the agent's own tools is answered with its code in the structured part.

    Bad arguments read `<tool>: invalid arguments: <field>: <problem>`: fastmcp passes pydantic's
    own text through, with its input dumps and documentation links, which is noise to a caller
    and can echo back whatever they sent. An unknown tool keeps fastmcp's text.
    """

    async def on_call_tool(
        self,
        context: MiddlewareContext[CallToolRequestParams],
        call_next: CallNext[CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        try:
            return await call_next(context)
        except ArgumentsInvalid as exc:
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            text = f"{context.message.name}: invalid arguments: {describe(cause, limit=5)}"
            return error_result(ErrorCode.INVALID_ARGUMENTS, text)
        except CodedToolError as exc:
            return error_result(exc.code, str(exc))
        except NotFoundError:
            return error_result(ErrorCode.TOOL_NOT_FOUND, f"Unknown tool: {context.message.name!r}")


def _request_meta(ctx: Context) -> Mapping[str, Any] | None:
    """The request's `_meta` as sent (the wire dict: camelCase keys)."""
    meta = ctx.request_context.meta if ctx.request_context is not None else None
    return meta if isinstance(meta, Mapping) else None


def _progress_sender(ctx: Context) -> Any:
    meta = _request_meta(ctx)
    if not meta or meta.get("progressToken") is None:
        return None
    return ctx.report_progress


def _wants_tool_calls(ctx: Context) -> bool:
    meta = ctx.request_context.meta if ctx.request_context is not None else None
    return bool(meta and meta.get(TOOL_CALLS_META) is True)


def _session_id() -> str | None:
    return get_http_headers(include={"mcp-session-id"}).get("mcp-session-id")


def _checked(conversation_id: str | None) -> str | None:
    try:
        return checked_id(conversation_id) if conversation_id else None
    except ValueError as exc:
        raise CodedToolError(str(exc), ErrorCode.INVALID_ARGUMENTS) from None


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
        elif isinstance(message, AssistantMessage | ToolResultsMessage):
            # Tool activity is the agent's side of the turn: the assistant's role, one line each.
            rendered.extend(PromptMessage(line, role="assistant") for line in tool_activity(message))
            if isinstance(message, AssistantMessage) and message.text:
                rendered.append(PromptMessage(message.text, role="assistant"))
    return rendered


def build_server(
    config: AgentConfig,
    *,
    metrics: RuntimeMetrics | None = None,
    provider: LLMProvider | None = None,
    sources: Sequence[ToolSource] | None = None,
    environ: Mapping[str, str] | None = None,
    store: ConversationStore | None = None,
) -> FastMCP:
    """The agent's MCP server. Serve it with `server.http_app(path="/mcp")`.

    Args:
        config: The agent's configuration.
        metrics: Process-wide metrics; a new registry by default.
        provider: The LLM provider; built from config and environment by default.
        sources: Downstream servers and peer agents; built from config by default.
        environ: Environment for secret env vars (API key, headers); the process's by default.
        store: Where conversations are kept; built from `config.conversations` by default.

    Raises:
        ValueError: the conversation store cannot be built (the message names the setting).
    """
    metrics = metrics or RuntimeMetrics()
    provider = provider or create_provider(config, environ)
    sources = list(sources) if sources is not None else build_sources(config, environ)
    store = store or build_store(config, environ)
    loop = AgentLoop(config, provider, sources, metrics, secret_values(config, environ))
    scope = config.conversation_scope
    conversations = Conversations(config.identity, scope, store, loop, sessions=config.sessions.max_sessions)
    if scope == "caller" and config.auth.mode == "none":
        log.warning(
            "agent %s: conversation scope caller without inbound auth: every client continues one "
            "shared conversation (a single-user agent; docs/api.md §3)",
            config.name,
        )
    auth = build_auth(config, metrics)
    agent = config.name
    inflight = InFlight(agent)
    health = HealthChecker(
        config,
        provider,
        sources,
        metrics,
        environ,
        store=store,
        access_problem=auth.verifier.problem if auth else None,
        in_flight=lambda: inflight.count,
    )
    state = {"ready": False}
    send_names = send_message_names(config)
    metrics.agent_info.labels(agent, config.model).set(1)
    metrics.active_conversations.labels(agent).set(0)
    metrics.send_message_in_flight.labels(agent).set_function(lambda: inflight.count)
    # Both outcome series exist from the start, so rate() sees the first error of a new agent.
    for outcome in ("ok", "error"):
        metrics.send_message_total.labels(agent, outcome)
    for decision in AUTH_OUTCOMES:  # open agents too: 0 says nobody was refused
        metrics.auth_requests_total.labels(agent, decision)

    async def preflight() -> None:
        check = await health.check_provider()
        if not check.ok:  # warn-only: the agent serves, get_health reports it
            log.warning("LLM provider preflight failed: %s", check.message)

    async def refresh_gauge() -> None:
        with contextlib.suppress(StoreUnavailable):
            metrics.active_conversations.labels(agent).set(await store.count(agent))

    pending_refresh: list[asyncio.Task[None]] = []

    async def conversations_changed(*, count_changed: bool) -> None:
        # Counting a memory store costs nothing, and any turn may expire or evict others. A
        # database's count changes here only when a conversation is created or deleted (other
        # replicas' turns and the TTL sweep are counted every GAUGE_REFRESH); it is counted in the
        # background, at most one count in flight, so a turn never waits on it.
        if store.kind == "memory":
            await refresh_gauge()
        elif count_changed and (not pending_refresh or pending_refresh[-1].done()):
            pending_refresh[:] = [asyncio.create_task(refresh_gauge())]

    async def keep_gauge() -> None:
        while True:
            await refresh_gauge()
            await asyncio.sleep(GAUGE_REFRESH)

    @asynccontextmanager
    async def lifespan(_: FastMCP) -> AsyncIterator[dict[str, Any]]:
        await store.start()
        tasks = [asyncio.create_task(preflight()), asyncio.create_task(keep_gauge())]
        try:
            await asyncio.to_thread(_import_what_fastmcp_defers)
            state["ready"] = True
            yield {}
        finally:
            state["ready"] = False
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            closing = [provider.aclose(), store.aclose(), *(s.aclose() for s in sources)]
            if auth is not None:
                closing.append(auth.verifier.aclose())
            await asyncio.gather(*closing, return_exceptions=True)

    server = FastMCP(
        agent,
        instructions=config.description or None,
        version=config.version,
        lifespan=lifespan,
        middleware=[_SendMessageMetrics(agent, metrics, send_names), _CodedErrors()],
        mask_error_details=True,
        auth=auth,
    )

    def failed(exc: Exception | str, code: ErrorCode) -> CodedToolError:
        """One log line with the agent, the code and the reason, and the error the caller gets.

        A caller's own bad input is INFO, anything else WARNING; fastmcp's generic "Error calling
        tool" line (no agent, no reason) is silenced for them.
        """
        text = str(exc)
        level = logging.INFO if code is ErrorCode.INVALID_ARGUMENTS else logging.WARNING
        log.log(level, "send_message failed: %s", text, extra={"agent": agent, "code": code.value})
        return CodedToolError(text, code)

    _EDGES[server] = _Edges(
        lambda reason: metrics.requests_refused.labels(agent, reason).inc(), inflight, config.sessions
    )

    async def send_message(
        message: str,
        ctx: Context,
        images: list[ImageInput] | None = None,
        conversation_id: str | None = None,
        params: RequestParams | None = None,
    ) -> ToolResult:
        try:
            call_path = CallPath.inbound(_request_meta(ctx), agent, config.max_depth)
        except CallRefused as exc:
            raise failed(exc, exc.code) from None
        try:
            user = user_message(config, message, images)
            checked = checked_id(conversation_id) if conversation_id else None
            if params is not None:
                if refusal := config.call_params.refusal(params):
                    raise InvalidInput(refusal)
                provider.check_params(params)
        except (InvalidInput, ValueError) as exc:
            raise failed(exc, ErrorCode.INVALID_ARGUMENTS) from None
        inbound_auth = forwarded_credential(verified=auth is not None)
        reply: Reply | None = None
        try:
            with inflight.track():
                reply = await conversations.send(
                    current_caller(),
                    user,
                    conversation_id=checked,
                    session_id=_session_id(),
                    inbound_auth=inbound_auth,
                    progress=ProgressReporter(agent, _progress_sender(ctx)),
                    call_path=call_path,
                    params=params,
                )
        except LLMError as exc:
            raise failed(f"the language model call failed: {exc}", ErrorCode.LLM_ERROR) from None
        except MaxIterationsExceeded as exc:
            raise failed(exc, ErrorCode.MAX_ITERATIONS) from None
        except ToolChoiceUnavailable as exc:
            raise failed(exc, ErrorCode.INVALID_ARGUMENTS) from None
        except ConversationBusy as exc:
            raise failed(exc, ErrorCode.TIMEOUT) from None
        except (ShuttingDown, TurnLost) as exc:
            raise failed(exc, ErrorCode.SERVER_UNAVAILABLE) from None
        except StoreUnavailable as exc:
            raise failed(f"the conversation was not kept: {exc}", ErrorCode.SERVER_UNAVAILABLE) from None
        finally:
            # A failed turn can change the count too (a store that expired or evicted on the
            # way); only a finished turn that kept no conversation cannot.
            if reply is None or reply.conversation_id is not None:
                await conversations_changed(count_changed=reply is not None and reply.created)
        meta: dict[str, Any] = {}
        if reply.conversation_id is not None:
            meta[CONVERSATION_META] = reply.conversation_id
        if reply.history_left_out:
            meta[HISTORY_TRIMMED_META] = {"droppedMessages": reply.history_left_out}
        if _wants_tool_calls(ctx):
            meta[TOOL_CALLS_META] = tool_trace(reply.turn)
        return ToolResult(content=reply.text, meta=meta or None)

    for name in send_names:
        server.tool(name=name, description=send_message_description(config), output_schema=None)(send_message)

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
    async def history(conversation_id: str | None = None) -> list[PromptMessage]:
        try:
            checked = checked_id(conversation_id) if conversation_id else None
            messages = await conversations.history(current_caller(), checked, _session_id())
        except (NoConversation, ValueError, StoreUnavailable) as exc:
            # A caller's mistake is one INFO line without a traceback (fastmcp logs the error it
            # re-raises at the error's own level, with one: DEBUG keeps that out of the log).
            level = logging.WARNING if isinstance(exc, StoreUnavailable) else logging.INFO
            log.log(level, "%s_history failed: %s", agent, exc, extra={"agent": agent})
            raise PromptError(str(exc), log_level=logging.DEBUG) from None
        return _history_messages(messages)

    @server.tool(
        name="list_conversations",
        description=list_conversations_description(config),
        output_schema=None,
        annotations={"readOnlyHint": True},
    )
    async def list_conversations() -> str:
        try:
            threads = await conversations.threads(current_caller(), _session_id())
        except StoreUnavailable as exc:
            raise CodedToolError(str(exc), ErrorCode.SERVER_UNAVAILABLE) from None
        return json.dumps(
            {
                "conversations": [
                    {
                        "id": t.id,
                        "title": t.title,
                        "updatedAt": utc_timestamp(t.updated_at),
                        "messageCount": t.message_count,
                    }
                    for t in threads
                ]
            }
        )

    @server.tool(
        name="delete_conversation",
        description=DELETE_CONVERSATION_DESCRIPTION,
        output_schema=None,
        annotations={"destructiveHint": True, "idempotentHint": True},
    )
    async def delete_conversation(conversation_id: str) -> str:
        try:
            await conversations.delete(current_caller(), _checked(conversation_id) or "", _session_id())
        except NoConversation as exc:
            raise CodedToolError(str(exc), ErrorCode.INVALID_ARGUMENTS) from None
        except StoreUnavailable as exc:
            raise CodedToolError(str(exc), ErrorCode.SERVER_UNAVAILABLE) from None
        await conversations_changed(count_changed=True)
        return f"deleted conversation {conversation_id!r}"

    @server.resource(
        INSTRUCTION_URI,
        name="instruction",
        description=f"The instruction (system prompt) {config.display_title}'s model works under.",
        mime_type="text/plain",
    )
    def instruction() -> str:
        return config.instruction

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


@dataclass(frozen=True, slots=True)
class _Edges:
    """What the HTTP edge of one agent server needs from it."""

    refused: Callable[[str], None]
    """Counts a request refused before the MCP app, by reason (see `agent_app`, `refusals`)."""
    inflight: InFlight
    """Its running send_message calls (see `stop_turns`)."""
    sessions: SessionLimits
    """How many MCP sessions it keeps, for how long (`sessions.SessionTable`)."""


_EDGES: weakref.WeakKeyDictionary[FastMCP, _Edges] = weakref.WeakKeyDictionary()


async def stop_turns(server: FastMCP) -> int:
    """End the server's running send_message calls with "shutting down"; how many there were."""
    edges = _EDGES.get(server)
    return await edges.inflight.stop() if edges is not None else 0


def agent_app(server: FastMCP, allowed_hosts: Sequence[str] = ()) -> ASGIApp:
    """The agent's HTTP app: MCP at /mcp plus the probe and metrics routes.

    Requests over the MCP SDK's body limit are refused with a JSON-RPC error naming the limit,
    requests with more than one `Authorization` header with 400 `invalid_request`, before
    authentication (`SingleCredential`: the agent verifies one credential and forwards it), and a
    request reusing the id of one still in flight on its session with 409 (`OneRequestPerId`).
    MCP sessions are kept by a `SessionTable` within the agent's `spec.sessions`.

    DNS-rebinding protection is explicit: fastmcp 4.1.2's setting defaults to off. In "auto"
    mode it checks Host and Origin for servers bound to loopback (all of `pallas run`); listed
    hosts turn the check on for any bind address (e.g. the Service DNS names of a pod), and the
    server's own address is always accepted, so probes and scrapes by pod IP still work.
    """
    app = server.http_app(
        path="/mcp", host_origin_protection="auto", allowed_hosts=list(allowed_hosts) or None
    )
    edges = _EDGES.get(server)
    if edges is not None:
        serve_sessions(app, server, edges.sessions)
    refused = refusals(server)
    one_per_id = OneRequestPerId(app, MAX_REQUEST_BYTES, lambda: refused("duplicate_id"))
    one_credential = SingleCredential(one_per_id, lambda: refused("credentials"))
    return RequestLimit(one_credential, MAX_REQUEST_BYTES, lambda: refused("too_large"))


def refusals(server: FastMCP) -> Callable[[str], None]:
    """What counts the server's requests refused at its edge, by reason.

    The count is `pallas_requests_refused_total`; the reasons are its listener's (a head too
    large or too slow, `serving.serve(refused=…)`) and its app's (`agent_app`).
    """
    edges = _EDGES.get(server)
    return edges.refused if edges is not None else lambda reason: None


def secret_env_names(config: AgentConfig) -> list[str]:
    """Environment variables of `config` that hold secrets (redacted from logs)."""
    names = [config.provider.api_key_env] if config.provider.api_key_env else []
    names += [h.value_from_env for s in config.servers for h in s.headers if h.value_from_env]
    return names


def secret_values(config: AgentConfig, environ: Mapping[str, str] | None = None) -> SecretValues:
    """The values of `secret_env_names(config)`: what tool results are scrubbed of."""
    env = os.environ if environ is None else environ
    return SecretValues(value for name in secret_env_names(config) if (value := env.get(name)))


LAZY_FASTMCP_IMPORTS = ("key_value.aio.adapters.pydantic", "key_value.aio.stores.memory")
"""What fastmcp 4.1.2 imports at the first tool call (its session-state store)."""


def _import_what_fastmcp_defers() -> None:
    """Import, before the agent says ready, what fastmcp would import inside the first tool call.

    Its session-state store (py-key-value, decorated by beartype at import) took ~0.45 s of CPU
    in the first caller's request (py-spy), every time an agent started: a pod said ready and
    then made its first caller wait. Now `/readyz` says ready that much later instead (in a
    thread, while the preflight check of the provider runs on the loop).
    """
    for module in LAZY_FASTMCP_IMPORTS:
        with contextlib.suppress(ImportError):  # a later fastmcp may not use it
            importlib.import_module(module)
