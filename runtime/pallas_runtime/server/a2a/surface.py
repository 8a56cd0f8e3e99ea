"""An agent's A2A surface: the Agent Card and the JSON-RPC endpoint, on the a2a-sdk's server.

The SDK's `DefaultRequestHandler` keeps the tasks (in memory, per caller) and runs each message
through `TurnExecutor`; its JSON-RPC dispatcher speaks A2A 1.0 and, on the same endpoint, 0.3
(the version most A2A platforms still send), chosen per request by its `A2A-Version` header (none:
0.3). The card lists both interfaces and is answered per request the same way (`card_response`).
The endpoint sits behind the agent's access control exactly like `/mcp` (401 with the RFC 9728
challenge, 403 for a caller not allowed); the card is open, like the registry's catalogue: it says
how to call, not what was said.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.types import AgentCard, SendMessageRequest
from a2a.utils.constants import A2A_JSON_MEDIA_TYPE, VERSION_HEADER
from google.protobuf.json_format import MessageToDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, request_response

from pallas_api.names import A2A_PATH, AGENT_CARD_PATH
from pallas_runtime.agent.live import LiveAgent
from pallas_runtime.auth.provider import PallasAuth
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server.a2a.card import agent_card
from pallas_runtime.server.a2a.executor import TurnExecutor
from pallas_runtime.server.a2a.inbound import STREAMING, InboundContext
from pallas_runtime.server.a2a.params import checking_params
from pallas_runtime.server.a2a.tasks import BoundedTaskStore
from pallas_runtime.server.turn_entry import TurnEntry


class _Handler(DefaultRequestHandler):
    """The SDK's handler, marking the calls that stream: only they get the turn's progress."""

    def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        context.state[STREAMING] = True
        events: AsyncGenerator[Event, None] = super().on_message_send_stream(params, context)
        return events


def speaks_1x(version: str | None) -> bool:
    """Whether an `A2A-Version` header value names a 1.x protocol (absent: 0.3, as the spec says)."""
    if not version:
        return False
    major = version.strip().split(".", 1)[0]
    return major.isdigit() and int(major) >= 1


def card_response(card: AgentCard, version: str | None) -> Response:
    """The card as the asking client's protocol version reads it.

    A client that says `A2A-Version: 1.x` (the JavaScript SDK does) gets the 1.0 card alone, as
    `application/a2a+json`. Any other (a 0.3 client sends no version) gets the card with the
    0.3 fields added beside the 1.0 ones, as the a2a-sdk serves it (`url`, `preferredTransport`,
    `protocolVersion`, `security`, each security scheme in both shapes): a 1.0 reader that
    sniffs shapes (the JavaScript SDK does) misreads those merged schemes, hence the split.
    """
    headers = {"Vary": VERSION_HEADER}
    if speaks_1x(version):
        return JSONResponse(MessageToDict(card), media_type=A2A_JSON_MEDIA_TYPE, headers=headers)
    return JSONResponse(agent_card_to_dict(card), headers=headers)


class A2ASurface:
    """The routes an agent adds for A2A, and the task handler behind them."""

    def __init__(
        self, live: LiveAgent, entry: TurnEntry, metrics: RuntimeMetrics, auth: PallasAuth | None
    ) -> None:
        config = live.config
        self._live = live
        self._auth = auth
        self.handler = _Handler(
            agent_executor=TurnExecutor(config.name, entry, metrics),
            task_store=BoundedTaskStore(config.history.max_conversations, scope=config.conversation_scope),
            agent_card=self._card_now(None),
        )
        self._context = InboundContext(verified=auth is not None)

    def _card_now(self, request: Request | None) -> AgentCard:
        """The card of the agent's config now (a live edit of its description shows at once).

        An agent run by hand knows no URL of its own: its card names the address it was read at.
        """
        config = self._live.config
        url = config.a2a.url
        if url is None:
            base = str(request.base_url).rstrip("/") if request is not None else "http://localhost"
            url = f"{base}{A2A_PATH}"
        return agent_card(config, url)

    async def _card(self, request: Request) -> Response:
        return card_response(self._card_now(request), request.headers.get(VERSION_HEADER))

    def routes(self) -> list[BaseRoute]:
        """The card at the well-known path and the JSON-RPC endpoint at `/a2a`."""
        (rpc,) = create_jsonrpc_routes(
            self.handler, A2A_PATH, context_builder=self._context, enable_v0_3_compat=True
        )
        assert isinstance(rpc, Route)
        endpoint = checking_params(rpc.endpoint)
        rpc_route = Route(A2A_PATH, endpoint=endpoint, methods=["POST"])
        if self._auth is not None:  # an ASGI app (not a function): Route serves it as such
            rpc_route = Route(
                A2A_PATH, endpoint=self._auth.require(request_response(endpoint)), methods=["POST"]
            )
        return [
            Route(AGENT_CARD_PATH, endpoint=self._card, methods=["GET"]),
            rpc_route,
        ]

    async def aclose(self) -> None:
        """Let the tasks still running end (the turns themselves are drained by `InFlight`)."""
        await self.handler.aclose()
