"""An A2A agent built with the a2a-sdk's own server, nothing of Pallas in it, for Pallas to call.

    async with echo_a2a_agent(require_key="k1") as helper:
        ...  # helper.url (its base: the card at /.well-known/agent-card.json), helper.received

It answers every message with `echo: <text>` as a task: a `working` status saying `thinking`,
the answer as an artifact, then `completed`. It records what each message carried (text,
contextId, metadata, headers). With `require_key`, a request without `X-Api-Key: <key>` is
answered 401.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Role, TaskState
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.support.mcp_servers import serve_app


@dataclass
class Received:
    text: str
    context_id: str
    metadata: dict[str, Any]
    headers: dict[str, str]


@dataclass
class EchoAgent:
    url: str = ""
    received: list[Received] = field(default_factory=list)


class _Echo(AgentExecutor):
    def __init__(self, agent: EchoAgent) -> None:
        self._agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        headers = context.call_context.state.get("headers", {})
        text = context.get_user_input()
        self._agent.received.append(
            Received(
                text,
                context.context_id or "",
                MessageToDict(context.message.metadata) | context.metadata,
                headers,
            )
        )
        await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.update_status(
            TaskState.TASK_STATE_WORKING, message=new_text_message("thinking", role=Role.ROLE_AGENT)
        )
        await updater.add_artifact([new_text_part(f"echo: {text}")], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class _RequireKey:
    def __init__(self, app: ASGIApp, key: str) -> None:
        self._app, self._key = app, key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"x-api-key") != self._key:
            await JSONResponse({"error": "no key"}, status_code=401)(scope, receive, send)
            return
        await self._app(scope, receive, send)


@contextlib.asynccontextmanager
async def echo_a2a_agent(
    *, require_key: str | None = None, streaming: bool = True
) -> AsyncIterator[EchoAgent]:
    """Serve the echo agent on a free 127.0.0.1 port (its card names its own JSON-RPC URL)."""
    agent = EchoAgent()
    card = AgentCard(
        name="echo",
        description="Says back what it is told.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url="http://placeholder/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Repeats the message.", tags=["echo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=_Echo(agent), task_store=InMemoryTaskStore(), agent_card=card
    )

    async def card_with_url(_: AgentCard) -> AgentCard:
        return card

    app = Starlette(
        routes=[
            *create_agent_card_routes(card, card_modifier=card_with_url),
            *create_jsonrpc_routes(handler, "/"),
        ]
    )
    served: ASGIApp = _RequireKey(app, require_key) if require_key else app
    async with serve_app(served, path="") as running:
        base = running.url
        agent.url = base
        card.supported_interfaces[0].url = f"{base}/"
        yield agent
    await handler.aclose()
