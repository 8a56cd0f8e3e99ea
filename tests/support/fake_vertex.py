"""A scripted fake of Vertex AI's prediction API serving Anthropic models, plain and streamed.

`POST /v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`
answers a Messages API body, `…:streamRawPredict` the Messages API's SSE stream, as Vertex does.
The request body has no `model` (it is in the path), keeps `stream`, and carries an
`anthropic_version`; the key is an OAuth access token sent as a bearer. Errors are Google's
`{"error": {"code", "message", "status"}}` bodies.

`POST …/publishers/anthropic/models/count-tokens:rawPredict` counts a Messages body's input
tokens (`{"input_tokens": n}`; the model is in the body), as Vertex's token counting for Claude
does: 401 without the token, 404 for a model the fake does not serve.
"""

from __future__ import annotations

import dataclasses

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.fake_llm import FakeAnthropic, HttpError, RecordedRequest, Text, ToolCalls

_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}  # fmt: skip
PREFIX = "/v1/projects/"
COUNT = "/models/count-tokens:rawPredict"


class FakeVertex(FakeAnthropic):
    """Vertex AI's `rawPredict` and `streamRawPredict` for Anthropic models."""

    completion_path = "/v1/projects"
    base_path = "/v1"

    def _routes(self) -> list[Route]:
        count = (
            "/v1/projects/{project}/locations/{region}/publishers/anthropic/models/count-tokens:rawPredict"
        )
        return [
            Route(count, self._count_tokens, methods=["POST"]),
            Route("/v1/projects/{rest:path}", self._handle_completion, methods=["POST"]),
        ]

    @property
    def completions(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith(PREFIX) and COUNT not in r.path]

    @property
    def counts(self) -> list[RecordedRequest]:
        """The token-counting requests (what a health check sends)."""
        return [r for r in self.requests if COUNT in r.path]

    async def _count_tokens(self, request: Request) -> Response:
        recorded = await self._record(request)
        if not self._authorized(recorded):
            return self._error(HttpError(401, "Request had invalid authentication credentials."))
        model = (recorded.json or {}).get("model")
        if model not in self.models:
            where = request.path_params["region"]
            return self._error(HttpError(404, f"Publisher model {model} not found in {where}."))
        return JSONResponse({"input_tokens": 3})

    def _render_reply(self, step: Text | ToolCalls, recorded: RecordedRequest) -> Response:
        model = recorded.path.rsplit("/models/", 1)[1].split(":", 1)[0]
        as_anthropic = dataclasses.replace(recorded, json={**(recorded.json or {}), "model": model})
        return super()._render_reply(step, as_anthropic)

    def _error(self, error: HttpError) -> Response:
        status = _STATUS.get(error.status, "INTERNAL")
        body = {"error": {"code": error.status, "message": error.message, "status": status}}
        return JSONResponse(body, status_code=error.status, headers=dict(error.headers))
