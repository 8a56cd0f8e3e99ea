"""An external A2A agent (`spec.a2aAgents[]`) as a ToolSource: one `send_message` tool, like a peer.

The model sees `<name>__send_message(message)` exactly as it sees a Pallas peer. A call is one
A2A `SendMessage` through the a2a-sdk's client, made from the agent's card (streaming when the
card says it streams):

- the conversation: the message's `contextId` is derived from the calling turn's conversation
  (`peer_conversation_id`), so the peer keeps context per caller conversation, as a Pallas peer
  does;
- loop and depth protection: the calling turn's path of agents travels in the request's
  metadata under the MCP `_meta` keys (`pallas.dev/callPath`, `pallas.dev/hops`); a Pallas agent
  answering over A2A checks them, and a call that would loop or go too deep is refused here,
  unsent;
- the caller's identity: the caller's bearer is sent only with `forwardInboundAuth` (off by
  default: an external agent is outside the deployment's trust boundary) and no configured
  `Authorization` header;
- where credentials go: the card names the endpoint, but a peer that is sent credentials
  (configured headers, or `forwardInboundAuth`) is called only at endpoints of its configured
  URL's origin; the card's others are ignored, and a card naming none is an error, so whoever
  controls the card cannot send the credentials elsewhere;
- progress: the peer's status messages are relayed like a Pallas peer's progress;
- the answer: the task's artifacts' text (or the message's); a task that ends failed, rejected
  or canceled is an error result, with the peer's code when it is a Pallas agent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.client.errors import A2AClientError, AgentCardResolutionError
from a2a.helpers import get_message_text, new_text_message
from a2a.types import AgentCard, Role, SendMessageRequest, StreamResponse, Task, TaskState
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from pallas_api.config import A2APeer
from pallas_api.errors import ErrorCode
from pallas_api.spending import SPEND_META
from pallas_runtime.conversations.caller import peer_conversation_id
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.downstream.call_path import CallRefused
from pallas_runtime.downstream.connection import tls_context
from pallas_runtime.downstream.inbound_auth import BearerForwarding
from pallas_runtime.downstream.mcp_server import resolve_headers
from pallas_runtime.downstream.source import (
    DownstreamError,
    DownstreamTimeout,
    Onward,
    ProbeResult,
    ProgressHandler,
    RemoteTool,
    ToolOutcome,
)
from pallas_runtime.messages import TextPart
from pallas_runtime.sizes import human_bytes, utf8_size
from pallas_runtime.spending import guard as spending

log = logging.getLogger("pallas.downstream")

SEND_MESSAGE = "send_message"
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"message": {"type": "string", "description": "What to ask or tell the agent."}},
    "required": ["message"],
}
FAILED_STATES = {
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_REJECTED: "was rejected",
    TaskState.TASK_STATE_CANCELED: "was canceled",
}
ERROR_META = "pallas.dev/error"
"""Where a Pallas agent answering over A2A puts its error's code (`server.a2a.executor`)."""


def card_location(url: str) -> tuple[str, str]:
    """(base URL, card path) of a configured URL: the card's own URL, or the base it is under."""
    if url.endswith(".json"):
        base, _, name = url.rpartition("/")
        if base.endswith("/.well-known"):
            return base.removesuffix("/.well-known"), f".well-known/{name}"
        return base, name
    return url.rstrip("/"), AGENT_CARD_WELL_KNOWN_PATH


class CardElsewhere(ValueError):
    """A card naming no endpoint on the origin of the agent's configured URL."""


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of `url`, the port made explicit for http and https."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    default = {"http": 80, "https": 443}.get(scheme)
    try:
        port = parts.port or default
    except ValueError:  # a port out of range: an origin nothing else has
        port = -1
    return scheme, (parts.hostname or "").lower(), port


def keep_origin(card: AgentCard, url: str) -> None:
    """Drop the card's endpoints that are not on `url`'s origin (where credentials may go).

    Raises:
        CardElsewhere: none is left.
    """
    trusted = origin(url)
    named = list(card.supported_interfaces)
    kept = [i for i in named if origin(i.url) == trusted]
    if not kept:
        others = ", ".join(sorted({i.url for i in named})) or "none"
        raise CardElsewhere(
            f"its agent card names endpoints only on another origin ({others}) than its configured URL "
            f"({url}); its credentials are sent to that origin only"
        )
    if len(kept) < len(named):
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(kept)


def describe_card(card: AgentCard) -> str:
    """What the model reads about the agent: its description and skills, from its card."""
    skills = "; ".join(f"{s.name}: {s.description}" if s.description else s.name for s in card.skills)
    text = f"Send a message to the agent {card.name} (A2A) and get its answer."
    if card.description:
        text += f" {card.description}"
    return f"{text} Skills: {skills}." if skills else text


class _Answer:
    """What the events of one send said: the answer's text so far, the state, the last status text."""

    def __init__(self) -> None:
        self.artifacts: dict[str, list[str]] = {}
        self.message: str | None = None
        self.state: TaskState = TaskState.TASK_STATE_UNSPECIFIED
        self.status_text = ""
        self.code: ErrorCode | None = None
        self.spent: dict[str, Any] = {}
        """The `_meta` spend the peer reported, if it is a Pallas agent (`spending.chain`)."""

    def task(self, task: Task) -> None:
        for artifact in task.artifacts:
            self.artifacts[artifact.artifact_id] = [p.text for p in artifact.parts if p.text]
        self.status(task.status.state, get_message_text(task.status.message) if task.status.message else "")
        self.error_code(MessageToDict(task.metadata) if task.metadata else {})

    def status(self, state: TaskState, text: str) -> None:
        self.state = state
        if text:
            self.status_text = text

    def error_code(self, metadata: Mapping[str, Any]) -> None:
        if SPEND_META in metadata:
            self.spent = {SPEND_META: metadata[SPEND_META]}
        error = metadata.get(ERROR_META)
        code = error.get("code") if isinstance(error, Mapping) else None
        if isinstance(code, str) and code in ErrorCode.__members__.values():
            self.code = ErrorCode(code)

    def text(self) -> str:
        if self.message is not None:
            return self.message
        joined = "\n".join("".join(parts) for parts in self.artifacts.values())
        return joined or self.status_text


class A2APeerSource:
    """One external A2A agent, offering the model its `send_message`."""

    def __init__(
        self, peer: A2APeer, *, probe_timeout: float, environ: Mapping[str, str] | None = None
    ) -> None:
        """Build the source; nothing connects until first use.

        Args:
            peer: The external agent's config.
            probe_timeout: The health probe's budget in seconds (`health.probeTimeoutSeconds`).
            environ: Where `valueFromEnv` headers are looked up; the process environment if None.
        """
        self._peer = peer
        self._probe_timeout = probe_timeout
        self._auth = BearerForwarding.of(
            resolve_headers(peer.name, peer.headers, environ), forward_inbound_auth=peer.forward_inbound_auth
        )
        self._headers = self._auth.configured
        self._base, self._card_path = card_location(peer.url)
        self._http: httpx.AsyncClient | None = None
        self._card: AgentCard | None = None
        self._client: Client | None = None

    @property
    def name(self) -> str:
        """The peer's name, the `<name>` of `<name>__send_message`."""
        return self._peer.name

    def _http_client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(verify=tls_context(), timeout=self._peer.timeout_seconds)
        return self._http

    def _call_headers(self, inbound_auth: str | None) -> dict[str, str]:
        return self._auth.headers(self._auth.bearer(inbound_auth))

    async def _fetch_card(self, headers: Mapping[str, str], budget: float) -> AgentCard:
        resolver = A2ACardResolver(self._http_client(), self._base, self._card_path)
        async with asyncio.timeout(budget):
            return await resolver.get_agent_card(http_kwargs={"headers": dict(headers)})

    async def _a2a_client(self, headers: Mapping[str, str], budget: float) -> Client:
        if self._client is None:
            card = await self._fetch_card(headers, budget)
            if self._headers or self._peer.forward_inbound_auth:
                keep_origin(card, self._peer.url)
            config = ClientConfig(streaming=card.capabilities.streaming, httpx_client=self._http_client())
            self._card, self._client = card, ClientFactory(config).create(card)
        return self._client

    def _forget(self) -> None:
        """Read the card again next time (the agent may have moved or changed)."""
        self._card = self._client = None

    async def list_tools(self, *, inbound_auth: str | None = None) -> list[RemoteTool]:
        """Its `send_message`, described by its card (a plain description while it is unreachable)."""
        if self._card is None:
            try:
                # The probe's budget: a turn lists tools first, and an unreachable peer must not
                # hold it for the peer's whole call timeout.
                await self._a2a_client(self._call_headers(inbound_auth), self._probe_timeout)
            except (A2AClientError, A2AError, httpx.HTTPError, TimeoutError, ValueError) as exc:
                log.warning("%s: the A2A agent's card could not be read: %s", self.name, exc)
        description = (
            describe_card(self._card)
            if self._card is not None
            else f"Send a message to the A2A agent {self.name}."
        )
        return [RemoteTool(self.name, SEND_MESSAGE, description, INPUT_SCHEMA)]

    def _request(self, arguments: Mapping[str, Any], onward: Onward) -> SendMessageRequest:
        # What the root caller has left goes along, as to a Pallas peer: a Pallas agent over A2A
        # keeps to it and reports its spend back in the task's metadata.
        meta = onward.meta(self.name)
        conversation = onward.conversation
        context_id = peer_conversation_id(conversation, self.name) if conversation is not None else None
        message = new_text_message(
            str(arguments.get("message", "")), context_id=context_id, role=Role.ROLE_USER
        )
        request = SendMessageRequest(message=message)
        if meta:
            request.metadata.update(meta)
        return request

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        onward: Onward,
    ) -> ToolOutcome:
        """One A2A message; its task's answer, or an error result saying how it ended.

        It holds what it passes on of the turn's budget until it returns (`spending.peer_grant`).

        Raises:
            DownstreamError: the agent could not be reached or answered with no usable task.
            DownstreamTimeout: no answer within `timeoutSeconds`.
        """
        if tool != SEND_MESSAGE:
            text = f"{self.name}: no tool {tool!r}; the A2A agent offers {SEND_MESSAGE}"
            return ToolOutcome((TextPart(text),), is_error=True, code=ErrorCode.TOOL_NOT_FOUND)
        async with spending.peer_grant(onward.budget) as grant:
            return await self._send(arguments, replace(onward, grant=grant))

    async def _send(self, arguments: dict[str, Any], onward: Onward) -> ToolOutcome:
        try:
            request = self._request(arguments, onward)
        except CallRefused as exc:
            return ToolOutcome((TextPart(str(exc)),), is_error=True, code=exc.code)
        headers = self._call_headers(onward.credential)
        answer = _Answer()
        try:
            async with asyncio.timeout(self._peer.timeout_seconds):
                client = await self._a2a_client(headers, self._peer.timeout_seconds)
                context = ClientCallContext(service_parameters=headers)
                try:
                    async for event in client.send_message(request, context=context):
                        await self._follow(event, answer, onward.on_progress)
                finally:  # what the peer spent is charged however the call ended
                    await spending.peer_answered(onward.budget, answer.spent)
        except TimeoutError:
            raise DownstreamTimeout(
                f"{self.name}: {SEND_MESSAGE} timed out after {self._peer.timeout_seconds:g}s"
            ) from None
        except (A2AClientError, A2AError, httpx.HTTPError, AgentCardResolutionError, ValueError) as exc:
            self._forget()
            raise DownstreamError(
                f"{self.name}: calling {SEND_MESSAGE} failed: {exc or type(exc).__name__}"
            ) from None
        return self._outcome(answer)

    async def _follow(
        self, event: StreamResponse, answer: _Answer, on_progress: ProgressHandler | None
    ) -> None:
        kind = event.WhichOneof("payload")
        if kind == "message":
            answer.message = get_message_text(event.message)
            answer.state = TaskState.TASK_STATE_COMPLETED
        elif kind == "task":
            answer.task(event.task)
        elif kind == "status_update":
            update = event.status_update
            text = get_message_text(update.status.message) if update.status.message.parts else ""
            answer.status(update.status.state, text)
            if update.metadata:
                answer.error_code(MessageToDict(update.metadata))
            if on_progress is not None and text and update.status.state == TaskState.TASK_STATE_WORKING:
                await on_progress(0, None, text)
        elif kind == "artifact_update":
            update = event.artifact_update
            texts = [p.text for p in update.artifact.parts if p.text]
            if update.append:
                answer.artifacts.setdefault(update.artifact.artifact_id, []).extend(texts)
            else:
                answer.artifacts[update.artifact.artifact_id] = texts

    def _outcome(self, answer: _Answer) -> ToolOutcome:
        text = answer.text()
        size = utf8_size(text)
        if size > self._peer.max_result_bytes:
            text = (
                f"{self.name}: the answer is {human_bytes(size)}; "
                f"the limit is {human_bytes(self._peer.max_result_bytes)} (maxResultBytes)"
            )
            return ToolOutcome((TextPart(text),), is_error=True)
        if answer.state in FAILED_STATES:
            said = f": {text}" if text else ""
            return ToolOutcome(
                (TextPart(f"{self.name}: the task {FAILED_STATES[answer.state]}{said}"),),
                is_error=True,
                code=answer.code,
            )
        return ToolOutcome((TextPart(text),))

    async def release(self, conversation: ConversationKey) -> None:
        """Nothing is held per conversation here (the peer keeps its own context)."""

    async def probe(self) -> ProbeResult:
        """Read its Agent Card within the probe timeout; never raises."""
        try:
            await self._fetch_card(self._headers, self._probe_timeout)
        except TimeoutError:
            return ProbeResult(self.name, ok=False, message=f"timed out after {self._probe_timeout:g}s")
        except (A2AClientError, A2AError, httpx.HTTPError, ValueError) as exc:
            return ProbeResult(self.name, ok=False, message=f"agent card: {exc or type(exc).__name__}")
        return ProbeResult(self.name, ok=True)

    async def aclose(self) -> None:
        """Close its connections."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None
