"""A scripted fake of the Gemini API (and of Vertex AI serving Gemini), plain and streamed.

Shapes from Google's API reference (ai.google.dev/api/generate-content, …/api/tokens):

- `POST /v1beta/models/{model}:generateContent` answers a `GenerateContentResponse`:
  `candidates[0].content` (role `model`, `parts` of `text` and `functionCall {name, args}`),
  `finishReason` (`STOP`, `MAX_TOKENS`, …), `usageMetadata` (`promptTokenCount`,
  `candidatesTokenCount`, `thoughtsTokenCount`, `cachedContentTokenCount`, `totalTokenCount`)
  and `modelVersion`; the key comes in `x-goog-api-key`.
- `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` sends the same response in
  `data:` chunks: the text piece by piece, a function call whole, the finish reason and usage on
  the last chunk.
- `POST /v1beta/models/{model}:countTokens` answers `{"totalTokens": n}`; 404 for a model the
  fake does not serve. `GET /v1beta/models/{model}` describes a model (the registry's check).
- Vertex AI: the same bodies under
  `/v1/projects/{project}/locations/{region}/publishers/google/models/{model}:{method}`, the key
  an OAuth access token sent as a bearer.
- Errors are Google's `{"error": {"code", "message", "status"}}`.

Thought signatures as Gemini 3 has them: the first function call of each answer carries a
`thoughtSignature` the fake makes up (and records in `signatures`); a request whose history
holds a model turn with function calls must carry, on that turn's first call, a signature the
fake gave out, or it is refused with HTTP 400 and Gemini's message. `Call(signature=...)` is not
needed: the fake signs every answer with calls.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.fake_llm import (
    FakeUsage,
    HttpError,
    RecordedRequest,
    Text,
    ToolCalls,
    _FakeServer,
    _pieces,
    _sse,
)

_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}  # fmt: skip
UNAUTHENTICATED = "API key not valid. Please pass a valid API key."
MISSING_SIGNATURE = (
    "Function call is missing a thought_signature in functionCall parts. This is required for tools "
    "to work correctly, and missing thought_signature may lead to degraded model performance. "
    "Additional data, function call `default_api:{name}` , position {position}. Please refer to "
    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)


def _method(path: str) -> tuple[str, str]:
    """(model, method) of `…/models/{model}:{method}`."""
    tail = path.rsplit("/models/", 1)[1]
    model, _, method = tail.partition(":")
    return model, method


class FakeGemini(_FakeServer):
    """The Gemini API's generateContent, streamGenerateContent and countTokens (and Vertex's)."""

    base_path = "/v1beta"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.signatures: list[str] = []
        """The thought signatures given out, in order."""
        self._signature_ids = itertools.count(1)

    def _routes(self) -> list[Route]:
        return [
            Route("/v1beta/models/{rest:path}", self._dispatch, methods=["POST"]),
            Route("/v1beta/models/{model}", self._handle_models, methods=["GET"]),
            Route("/v1beta/models", self._handle_models, methods=["GET"]),
            Route("/v1/projects/{rest:path}", self._dispatch, methods=["POST"]),
        ]

    @property
    def vertex_base_url(self) -> str:
        """What a `platform: vertex` provider's `baseURL` should be."""
        return self.url + "/v1"

    @property
    def completions(self) -> list[RecordedRequest]:
        return [
            r
            for r in self.requests
            if r.path.endswith("GenerateContent") or r.path.endswith(":generateContent")
        ]

    @property
    def counts(self) -> list[RecordedRequest]:
        """The token-counting requests (what a health check sends)."""
        return [r for r in self.requests if r.path.endswith(":countTokens")]

    async def _dispatch(self, request: Request) -> Response:
        _model, method = _method(request.url.path)
        if method == "countTokens":
            return await self._count_tokens(request)
        if method not in ("generateContent", "streamGenerateContent"):
            return self._error(HttpError(404, f"Method {method} not found."))
        body = json.loads(await request.body() or b"null")
        refusal = self._refusal(body)
        if not self._authorized(await self._record(request)):
            refusal = HttpError(401, UNAUTHENTICATED)
        if refusal is not None:
            return self._error(refusal)
        self.requests.pop()  # recorded again, as every completion is, by the shared handler
        return await self._handle_completion(request)

    def _refusal(self, body: object) -> HttpError | None:
        """What Gemini 3 refuses in a request body: roles it has none of, unsigned function calls."""
        if not isinstance(body, dict) or not isinstance(body.get("contents"), list):
            return HttpError(400, "* GenerateContentRequest.contents: contents is not specified")
        for index, content in enumerate(body["contents"]):
            if content.get("role") not in ("user", "model"):
                return HttpError(400, f"Please use a valid role: user, model. (contents[{index}])")
            calls = [p for p in content.get("parts", []) if "functionCall" in p]
            if calls and calls[0].get("thoughtSignature") not in self.signatures:
                return HttpError(
                    400,
                    MISSING_SIGNATURE.format(name=calls[0]["functionCall"].get("name"), position=index + 1),
                )
        return None

    async def _count_tokens(self, request: Request) -> Response:
        recorded = await self._record(request)
        if not self._authorized(recorded):
            return self._error(HttpError(401, UNAUTHENTICATED))
        model, _ = _method(recorded.path)
        if model not in self.models:
            return self._error(
                HttpError(
                    404,
                    f"models/{model} is not found for API version v1beta, "
                    "or is not supported for countTokens.",
                )
            )
        return JSONResponse({"totalTokens": 3})

    def _authorized(self, recorded: RecordedRequest) -> bool:
        if self.api_key is None:
            return True
        if recorded.path.startswith("/v1/projects/"):
            return recorded.headers.get("authorization") == f"Bearer {self.api_key}"
        return recorded.headers.get("x-goog-api-key") == self.api_key

    @staticmethod
    def _usage(usage: FakeUsage) -> dict[str, Any]:
        prompt = usage.input + usage.cache_read
        candidates = usage.output - usage.reasoning
        return {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "thoughtsTokenCount": usage.reasoning,
            "cachedContentTokenCount": usage.cache_read,
            "totalTokenCount": prompt + usage.output,
        }

    def _sign(self) -> str:
        signature = f"CiQB{next(self._signature_ids):04d}fakeSignature=="
        self.signatures.append(signature)
        return signature

    def _parts(self, step: Text | ToolCalls) -> list[dict[str, Any]]:
        """The function call parts of a step: the first signed, as Gemini 3 signs parallel calls."""
        if not isinstance(step, ToolCalls):
            return []
        parts: list[dict[str, Any]] = []
        for call in step.calls:
            arguments = (
                json.loads(call.arguments) if isinstance(call.arguments, str) else dict(call.arguments)
            )
            function: dict[str, Any] = {"name": call.name, "args": arguments}
            if call.id is not None:
                function["id"] = call.id
            part: dict[str, Any] = {"functionCall": function}
            if not parts:
                part["thoughtSignature"] = self._sign()
            parts.append(part)
        return parts

    def _render_reply(self, step: Text | ToolCalls, recorded: RecordedRequest) -> Response:
        model, method = _method(recorded.path)
        calls = self._parts(step)
        usage: Any = None
        if isinstance(step.usage, FakeUsage):
            usage = self._usage(step.usage)
        elif step.usage is not None:
            usage = dict(step.usage)
        finish = step.stop_reason or "STOP"
        frame = {"modelVersion": model, "responseId": f"fake-{self._next_id()}"}
        if method == "streamGenerateContent" and recorded.query.get("alt") == "sse":
            self.streams.append([])
            return _sse(self._chunks(frame, step, calls, finish, usage), step.interval, {}, self.streams[-1])
        parts = ([{"text": step.text}] if step.text else []) + calls
        candidate = {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
        body: dict[str, Any] = {"candidates": [candidate], **frame}
        if usage is not None:
            body["usageMetadata"] = usage
        return JSONResponse(body)

    @staticmethod
    def _chunks(
        frame: Mapping[str, Any], step: Text | ToolCalls, calls: list[dict[str, Any]], finish: str, usage: Any
    ) -> Iterator[str]:
        def chunk(parts: list[dict[str, Any]], last: bool = False) -> str:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            event: dict[str, Any] = {"candidates": [candidate], **frame}
            if last:
                candidate["finishReason"] = finish
                if usage is not None:
                    event["usageMetadata"] = usage
            return f"data: {json.dumps(event)}\r\n\r\n"

        pieces = _pieces(step)
        for piece in pieces:
            yield chunk([{"text": piece}])
        if calls:
            yield chunk(calls)
        yield chunk([{"text": ""}], last=True)

    def _models_response(self, recorded: RecordedRequest) -> Response:
        if recorded.path.endswith("/models"):
            size = int(recorded.query.get("pageSize", "50"))
            return JSONResponse({"models": [{"name": f"models/{m}"} for m in self.models[:size]]})
        model = recorded.path.rsplit("/", 1)[1]
        if model not in self.models:
            return self._error(HttpError(404, f"models/{model} is not found for API version v1beta"))
        return JSONResponse({"name": f"models/{model}", "displayName": model, "inputTokenLimit": 1048576})

    def _error(self, error: HttpError) -> Response:
        status = _STATUS.get(error.status, "INTERNAL")
        # The shared handlers' 401 ("invalid api key") in Gemini's own words.
        message = UNAUTHENTICATED if error.status == 401 else error.message
        body = {"error": {"code": error.status, "message": message, "status": status}}
        return JSONResponse(body, status_code=error.status, headers=dict(error.headers))
