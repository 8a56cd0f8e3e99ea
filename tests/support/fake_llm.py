"""Scripted fake LLM servers that speak the real OpenAI Chat Completions and Anthropic Messages wire formats.

Each fake is a Starlette app served by uvicorn on 127.0.0.1 (a free port), so the code under test
uses its normal SDK client against it. Every request is recorded (headers and JSON body) and
answered from a script: a queue of steps, consumed one per completion request. When the queue is
empty the fake's `default` step answers. Replies are immediate unless a step says otherwise.

Steps (all provider-neutral; each fake renders them in its own wire format):

- `Text("hello")`: a text reply (`finish_reason` "stop" / `stop_reason` "end_turn").
- `ToolCalls([Call("weather__forecast", '{"city": "Oslo"}'), Call("x__y", "not json")])`: one or
  several tool calls; `arguments` is sent as given (a raw string, so it may be malformed JSON,
  or a dict); optional `text` alongside.
- `HttpError(429, "slow down")`: an error status with the provider's real error JSON; it carries
  `retry-after-ms: 1` by default so the SDKs retry without sleeping.
- `Delay(2.0, then=Text("late"))`: wait first (to trigger client timeouts), then answer `then`
  (or the default). A fake that is closing cuts its delays short.
- `Raw(200, {...})`: any status, JSON body and headers, sent as is.
- `Hold(release)`: keep the request open until `release` (an asyncio.Event) is set, then answer
  `then`; a client that gives up meanwhile is seen (`fake.abandoned` counts it) and nothing is
  sent. `fake.holding` counts requests being held now; `await fake.held.wait()` waits for one.
- a callable `fn(request_json) -> dict | step` (or an async one): a dict is sent as a 200 JSON
  body, a step is rendered.

A request with `"stream": true` is answered as the real APIs stream: Server-Sent Events of
`chat.completion.chunk`s ending in `data: [DONE]` (with a usage chunk when
`stream_options.include_usage` asks), or Anthropic's `message_start` … `message_stop` events
(with a `ping`). The text goes out word by word (or as `pieces=` says), tool call arguments in
two fragments, `interval=` seconds apart (the model's pace).

`Text` and `ToolCalls` take `usage=FakeUsage(input=..., output=..., cache_read=..., cache_write=...,
reasoning=...)` (rendered per provider), a dict (sent verbatim as the wire `usage`), or None (no
`usage` at all, like some local servers). `stop_reason=` overrides the finish/stop reason.

Usage::

    async with FakeOpenAI(models=["my-model"]) as fake:
        fake.script(
            ToolCalls([Call("weather__forecast", '{"city": "Oslo"}')]),
            Text("It will rain."),
        )
        ...  # point the agent at fake.base_url ("http://127.0.0.1:PORT/v1")
        assert fake.completions[0].json["messages"][0] == {"role": "system", "content": "..."}

`FakeAnthropic` is used the same way; its `base_url` has no `/v1` (the Anthropic SDK adds it).
Pass `api_key="k"` to make a fake answer 401 to requests that do not carry that key. Preflight
endpoints (`GET /v1/models`, `GET /v1/models/{model}`) answer from `models`, or from the steps
queued with `script_models(...)` (errors, delays, raw bodies or callables).
The pytest fixtures `fake_openai` and `fake_anthropic` yield a started fake.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

# --- script steps ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FakeUsage:
    """Token counts in provider-neutral kinds; each fake renders them in its wire shape."""

    input: int = 10
    output: int = 5
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0


UsageSpec = FakeUsage | Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Text:
    text: str
    usage: UsageSpec = FakeUsage()
    stop_reason: str | None = None
    pieces: Sequence[str] | None = None
    """How a streamed answer splits the text (joined, they must be the text); default: by word."""
    interval: float = 0.0
    """Seconds between two streamed events (the first too): the model's pace."""


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    arguments: str | Mapping[str, Any] = "{}"
    """A raw JSON string (sent as is, so it may be malformed) or a dict."""
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCalls:
    calls: Sequence[Call]
    text: str = ""
    usage: UsageSpec = FakeUsage()
    stop_reason: str | None = None
    pieces: Sequence[str] | None = None
    interval: float = 0.0


@dataclass(frozen=True, slots=True)
class HttpError:
    status: int
    message: str = "fake error"
    type: str | None = None
    """The provider's error type; derived from the status when None."""
    headers: Mapping[str, str] = field(default_factory=lambda: {"retry-after-ms": "1"})


@dataclass(frozen=True, slots=True)
class Raw:
    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Delay:
    seconds: float
    then: Step | None = None


@dataclass(frozen=True, slots=True)
class Hold:
    release: asyncio.Event
    then: Step | None = None


Handler = Callable[[Any], "Mapping[str, Any] | Step | Awaitable[Mapping[str, Any] | Step]"]
Step = Text | ToolCalls | HttpError | Raw | Delay | Hold | Handler


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Lower-cased names."""
    json: Any
    """The decoded body; None for a GET or a body that is not JSON."""
    query: dict[str, str] = field(default_factory=dict)


# --- server ---------------------------------------------------------------------------------


class _QuietServer(uvicorn.Server):
    # Tests run in the main thread: leave Ctrl-C to pytest instead of uvicorn's handlers.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class RecordingServer(abc.ABC):
    """A provider's HTTP API on loopback (or the local node's bridge) recording every request.

    What every fake shares, the model servers and the credential services beside them (STS, a
    metadata server, an OAuth token endpoint): a uvicorn server on a port the kernel picks, its
    routes (`_routes`), and `requests`.
    """

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        # Loopback unless pods must reach it: then the local node's bridge address (never a
        # wildcard or an address out there).
        self.host = host
        self.requests: list[RecordedRequest] = []
        self._closing = asyncio.Event()
        self._server: _QuietServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    async def start(self) -> Self:
        self._closing = asyncio.Event()
        config = uvicorn.Config(
            Starlette(routes=self._routes()),
            host=self.host,
            port=0,
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = _QuietServer(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.001)
        # Port 0 lets the kernel pick a free port; uvicorn's own listening socket gets
        # TCP_NODELAY on accepted connections (a socket passed in without proto=TCP does not,
        # and each reply would then wait ~40 ms for a delayed ACK).
        self._port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self._closing.set()
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self._server = self._task = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @abc.abstractmethod
    def _routes(self) -> list[Route]:
        """Provided by each fake."""

    async def _record(self, request: Request) -> RecordedRequest:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        recorded = RecordedRequest(
            request.method, request.url.path, dict(request.headers), body, dict(request.query_params)
        )
        self.requests.append(recorded)
        return recorded


class _FakeServer(RecordingServer):
    """A model server: scripted steps answer its completion and models requests."""

    completion_path = ""
    base_path = ""
    default_models: tuple[str, ...] = ("fake-model",)
    """The models it lists when not told which."""

    def __init__(
        self,
        *,
        default: Step | None = None,
        models: Sequence[str] | None = None,
        api_key: str | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(host=host)
        self.default: Step = default if default is not None else Text("ok")
        self.models = list(models if models is not None else self.default_models)
        self.api_key = api_key
        self.streams: list[list[float]] = []
        """For each streamed answer, when each of its events was sent (time.monotonic())."""
        self._steps: deque[Step] = deque()
        self._model_steps: deque[Step] = deque()
        self._ids = itertools.count(1)
        self.holding = 0
        self.abandoned = 0
        self.held = asyncio.Event()
        """Set once a request is being held (see `Hold`)."""
        self._holding_changed = asyncio.Condition()

    # scripting

    def script(self, *steps: Step) -> None:
        """Queue steps answering the next completion requests, in order."""
        self._steps.extend(steps)

    def script_models(self, *steps: Step) -> None:
        """Queue steps answering the next models-endpoint requests, in order."""
        self._model_steps.extend(steps)

    @property
    def pending(self) -> int:
        """Completion steps not consumed yet."""
        return len(self._steps)

    def reset(self) -> None:
        """Forget recorded requests and queued steps."""
        self.requests.clear()
        self._steps.clear()
        self._model_steps.clear()

    @property
    def completions(self) -> list[RecordedRequest]:
        """The recorded completion requests."""
        return [r for r in self.requests if r.path == self.completion_path]

    @property
    def base_url(self) -> str:
        """What the provider's `baseURL` should be."""
        return self.url + self.base_path

    # request handling

    async def _handle_completion(self, request: Request) -> Response:
        recorded = await self._record(request)
        if not self._authorized(recorded):
            return self._error(HttpError(401, "invalid api key", headers={}))
        step = self._steps.popleft() if self._steps else self.default
        if isinstance(step, Hold):
            if not await self._hold(step, request):
                return Response(status_code=499)
            step = step.then if step.then is not None else self.default
        return await self._respond(step, recorded, self._render_reply)

    async def holding_at_least(self, count: int) -> None:
        """Wait until `count` requests are being held at once."""
        async with self._holding_changed:
            await self._holding_changed.wait_for(lambda: self.holding >= count)

    async def _hold(self, step: Hold, request: Request) -> bool:
        """Wait for the release; False when the client went away first."""
        self.holding += 1
        self.held.set()
        async with self._holding_changed:
            self._holding_changed.notify_all()
        try:
            while not step.release.is_set() and not self._closing.is_set():
                if await request.is_disconnected():
                    self.abandoned += 1
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(step.release.wait(), 0.05)
            return True
        finally:
            self.holding -= 1

    async def _handle_models(self, request: Request) -> Response:
        recorded = await self._record(request)
        if not self._authorized(recorded):
            return self._error(HttpError(401, "invalid api key", headers={}))
        if self._model_steps:
            return await self._respond(self._model_steps.popleft(), recorded, self._render_models_reply)
        return self._models_response(recorded)

    async def _respond(
        self,
        step: Step,
        recorded: RecordedRequest,
        render: Callable[[Text | ToolCalls, RecordedRequest], Response],
    ) -> Response:
        if isinstance(step, Delay):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), step.seconds)
            return await self._respond(step.then if step.then is not None else self.default, recorded, render)
        if isinstance(step, HttpError):
            return self._error(step)
        if isinstance(step, Raw):
            return JSONResponse(step.body, status_code=step.status, headers=dict(step.headers))
        if isinstance(step, Text | ToolCalls):
            return render(step, recorded)
        if isinstance(step, Hold):  # held only where a request is at hand (_handle_completion)
            return await self._respond(step.then if step.then is not None else self.default, recorded, render)
        outcome = step(recorded.json)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if isinstance(outcome, Mapping):
            return JSONResponse(dict(outcome))
        return await self._respond(outcome, recorded, render)

    def _render_models_reply(self, step: Text | ToolCalls, recorded: RecordedRequest) -> Response:
        return self._error(HttpError(500, f"fake: {type(step).__name__} cannot answer {recorded.path}"))

    def _next_id(self) -> int:
        return next(self._ids)

    @abc.abstractmethod
    def _authorized(self, recorded: RecordedRequest) -> bool:
        """Provided by each provider's fake."""

    @abc.abstractmethod
    def _render_reply(self, step: Text | ToolCalls, recorded: RecordedRequest) -> Response:
        """Provided by each provider's fake."""

    @abc.abstractmethod
    def _models_response(self, recorded: RecordedRequest) -> Response:
        """Provided by each provider's fake."""

    @abc.abstractmethod
    def _error(self, error: HttpError) -> Response:
        """Provided by each provider's fake."""


class _AnswersWithUsage(_FakeServer):
    """A model server whose answers are one JSON body or its stream, carrying a scripted usage."""

    @staticmethod
    @abc.abstractmethod
    def _usage(usage: FakeUsage) -> dict[str, Any]:
        """A scripted usage in this provider's wire form."""

    def _answer(
        self,
        recorded: RecordedRequest,
        step: Text | ToolCalls,
        body: dict[str, Any],
        headers: dict[str, str],
        events: Callable[[], Iterator[str]],
    ) -> Response:
        """`body` with the step's usage, as JSON or, when the request asked for a stream, as `events()`."""
        if isinstance(step.usage, FakeUsage):
            body["usage"] = self._usage(step.usage)
        elif step.usage is not None:
            body["usage"] = dict(step.usage)
        if _wants_stream(recorded):
            self.streams.append([])
            return _sse(events(), step.interval, headers, self.streams[-1])
        return JSONResponse(body, headers=headers)


def _pieces(step: Text | ToolCalls) -> list[str]:
    if step.pieces is not None:
        assert "".join(step.pieces) == step.text, "pieces must join into the text"
        return list(step.pieces)
    words = step.text.split(" ")
    return [w if i == 0 else f" {w}" for i, w in enumerate(words)] if step.text else []


def _halves(arguments: str) -> list[str]:
    middle = len(arguments) // 2
    return [arguments[:middle], arguments[middle:]] if middle else [arguments]


def _wants_stream(recorded: RecordedRequest) -> bool:
    return isinstance(recorded.json, dict) and recorded.json.get("stream") is True


def _sse(
    events: Iterator[str], interval: float, headers: Mapping[str, str], sent: list[float]
) -> StreamingResponse:
    """The events as an SSE response; `sent` gets the time.monotonic() of each event's sending."""

    async def paced() -> AsyncIterator[str]:
        for event in events:
            if interval:
                await asyncio.sleep(interval)
            sent.append(time.monotonic())
            yield event

    return StreamingResponse(paced(), media_type="text/event-stream", headers=dict(headers))


def _model_of(recorded: RecordedRequest) -> str:
    body = recorded.json
    return str(body.get("model", "")) if isinstance(body, dict) else ""


# --- OpenAI Chat Completions -----------------------------------------------------------------

_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
}


class FakeOpenAI(_AnswersWithUsage):
    """`POST /v1/chat/completions` and `GET /v1/models`, as api.openai.com answers them."""

    completion_path = "/v1/chat/completions"
    base_path = "/v1"

    def _routes(self) -> list[Route]:
        return [
            Route(self.completion_path, self._handle_completion, methods=["POST"]),
            Route("/v1/models", self._handle_models, methods=["GET"]),
        ]

    def _authorized(self, recorded: RecordedRequest) -> bool:
        return self.api_key is None or recorded.headers.get("authorization") == f"Bearer {self.api_key}"

    @staticmethod
    def _usage(usage: FakeUsage) -> dict[str, Any]:
        prompt = usage.input + usage.cache_read
        return {
            "prompt_tokens": prompt,
            "completion_tokens": usage.output,
            "total_tokens": prompt + usage.output,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
        }

    def _render_reply(self, step: Text | ToolCalls, recorded: RecordedRequest) -> Response:
        n = self._next_id()
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None, "refusal": None}
        finish = "stop"
        if isinstance(step, ToolCalls):
            finish = "tool_calls"
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_fake_{n}_{i}",
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments
                        if isinstance(call.arguments, str)
                        else json.dumps(call.arguments),
                    },
                }
                for i, call in enumerate(step.calls)
            ]
        body: dict[str, Any] = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": _model_of(recorded),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": step.stop_reason or finish,
                }
            ],
        }
        headers = {"x-request-id": f"req_fake_{n}"}
        return self._answer(recorded, step, body, headers, lambda: self._chunks(body, step, recorded))

    @staticmethod
    def _chunks(body: dict[str, Any], step: Text | ToolCalls, recorded: RecordedRequest) -> Iterator[str]:
        """The answer as `chat.completion.chunk` events, as the API streams it."""
        frame = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        choice = body["choices"][0]

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            event = frame | {
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
            }
            return f"data: {json.dumps(event)}\n\n"

        yield chunk({"role": "assistant", "content": ""})
        for piece in _pieces(step):
            yield chunk({"content": piece})
        for i, call in enumerate(choice["message"].get("tool_calls", [])):
            function = call["function"]
            named = {"name": function["name"], "arguments": ""}
            yield chunk(
                {"tool_calls": [{"index": i, "id": call["id"], "type": "function", "function": named}]}
            )
            for fragment in _halves(function["arguments"]):
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": fragment}}]})
        yield chunk({}, choice["finish_reason"])
        options = recorded.json.get("stream_options") if isinstance(recorded.json, dict) else None
        if isinstance(options, dict) and options.get("include_usage") and "usage" in body:
            yield f"data: {json.dumps(frame | {'choices': [], 'usage': body['usage']})}\n\n"
        yield "data: [DONE]\n\n"

    def _models_response(self, recorded: RecordedRequest) -> Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return JSONResponse({"object": "list", "data": data})

    def _error(self, error: HttpError) -> Response:
        kind = error.type or _OPENAI_ERROR_TYPES.get(
            error.status, "rate_limit_error" if error.status == 429 else "server_error"
        )
        body = {"error": {"message": error.message, "type": kind, "param": None, "code": None}}
        return JSONResponse(body, status_code=error.status, headers=dict(error.headers))


# --- Anthropic Messages ---------------------------------------------------------------------

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class FakeAnthropic(_AnswersWithUsage):
    """`POST /v1/messages`, `GET /v1/models` and `GET /v1/models/{model}`, as api.anthropic.com
    answers them (the list pages with `limit`, as the real one)."""

    completion_path = "/v1/messages"
    base_path = ""
    default_models = ("claude-fake",)

    def _routes(self) -> list[Route]:
        return [
            Route(self.completion_path, self._handle_completion, methods=["POST"]),
            Route("/v1/models", self._handle_models, methods=["GET"]),
            Route("/v1/models/{model_id:path}", self._handle_models, methods=["GET"]),
        ]

    def _authorized(self, recorded: RecordedRequest) -> bool:
        # The SDK sends the key as a bearer token; older clients send `x-api-key`.
        if self.api_key is None:
            return True
        headers = recorded.headers
        return (
            headers.get("x-api-key") == self.api_key
            or headers.get("authorization") == f"Bearer {self.api_key}"
        )

    @staticmethod
    def _usage(usage: FakeUsage) -> dict[str, Any]:
        return {
            "input_tokens": usage.input,
            "output_tokens": usage.output,
            "cache_read_input_tokens": usage.cache_read,
            "cache_creation_input_tokens": usage.cache_write,
        }

    @staticmethod
    def _tool_input(arguments: str | Mapping[str, Any]) -> Any:
        if not isinstance(arguments, str):
            return dict(arguments)
        try:
            return json.loads(arguments)
        except ValueError:
            # Malformed on purpose: send the string where the object belongs.
            return arguments

    def _render_reply(self, step: Text | ToolCalls, recorded: RecordedRequest) -> Response:
        n = self._next_id()
        content: list[dict[str, Any]] = [{"type": "text", "text": step.text}] if step.text else []
        stop = "end_turn"
        if isinstance(step, ToolCalls):
            stop = "tool_use"
            content.extend(
                {
                    "type": "tool_use",
                    "id": call.id or f"toolu_fake_{n}_{i}",
                    "name": call.name,
                    "input": self._tool_input(call.arguments),
                }
                for i, call in enumerate(step.calls)
            )
        body: dict[str, Any] = {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": _model_of(recorded),
            "content": content,
            "stop_reason": step.stop_reason or stop,
            "stop_sequence": None,
        }
        headers = {"request-id": f"req_fake_{n}"}
        return self._answer(recorded, step, body, headers, lambda: self._events(body, step))

    @staticmethod
    def _events(body: dict[str, Any], step: Text | ToolCalls) -> Iterator[str]:
        """The answer as Messages stream events, as the API streams it."""

        def event(kind: str, data: dict[str, Any]) -> str:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

        usage = dict(body.get("usage") or {})
        start_usage = {**usage, "output_tokens": 1} if usage else {}
        message = {k: v for k, v in body.items() if k != "usage"} | {"content": [], "stop_reason": None}
        yield event("message_start", {"message": {**message, "usage": start_usage}})
        yield event("ping", {})
        for index, block in enumerate(body["content"]):
            if block["type"] == "text":
                yield event(
                    "content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}
                )
                for piece in _pieces(step):
                    yield event(
                        "content_block_delta",
                        {"index": index, "delta": {"type": "text_delta", "text": piece}},
                    )
            else:
                start = {k: v for k, v in block.items() if k != "input"} | {"input": {}}
                yield event("content_block_start", {"index": index, "content_block": start})
                raw = block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
                for fragment in _halves(raw):
                    delta = {"type": "input_json_delta", "partial_json": fragment}
                    yield event("content_block_delta", {"index": index, "delta": delta})
            yield event("content_block_stop", {"index": index})
        stopped: dict[str, Any] = {"stop_reason": body["stop_reason"], "stop_sequence": None}
        yield event(
            "message_delta", {"delta": stopped, "usage": {"output_tokens": usage.get("output_tokens", 0)}}
        )
        yield event("message_stop", {})

    def _models_response(self, recorded: RecordedRequest) -> Response:
        if recorded.path == "/v1/models":
            limit = int(recorded.query.get("limit", "20"))
            page = [self._model(m) for m in self.models[:limit]]
            return JSONResponse(
                {
                    "data": page,
                    "has_more": len(self.models) > limit,
                    "first_id": page[0]["id"] if page else None,
                    "last_id": page[-1]["id"] if page else None,
                }
            )
        model = recorded.path.removeprefix("/v1/models/")
        if model not in self.models:
            return self._error(HttpError(404, f"model: {model}", headers={}))
        return JSONResponse(self._model(model))

    @staticmethod
    def _model(model: str) -> dict[str, Any]:
        return {
            "type": "model",
            "id": model,
            "display_name": model,
            "created_at": "2026-01-01T00:00:00Z",
            "lifecycle": "active",
        }

    def _error(self, error: HttpError) -> Response:
        kind = error.type or _ANTHROPIC_ERROR_TYPES.get(error.status, "api_error")
        body = {
            "type": "error",
            "error": {"type": kind, "message": error.message},
            "request_id": f"req_fake_{self._next_id()}",
        }
        return JSONResponse(body, status_code=error.status, headers=dict(error.headers))


# --- pytest fixtures ------------------------------------------------------------------------


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    """A started FakeOpenAI serving the model `fake-model`."""
    async with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    """A started FakeAnthropic serving the model `claude-fake`."""
    async with FakeAnthropic() as fake:
        yield fake
