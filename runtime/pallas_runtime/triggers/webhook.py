"""The HTTP endpoint of webhook triggers: `POST /triggers/<namespace>/<name>`.

In order, and nothing parses the body before the signature holds:
1. an unknown trigger is 404; a `Content-Length` over `maxBodyBytes` is 413 before a byte is
   read, and a body that grows past it while read is 413 too;
2. the signature (`pallas_api.triggers.signature`) over the raw bytes: 401 when it fails, and
   nothing runs;
3. only then the body is parsed: JSON, or a form (`application/x-www-form-urlencoded`, as Slack
   sends slash commands); malformed is 400, another media type 415;
4. a sender's handshake is answered, not run: GitHub's `ping` event (sent when a hook is
   created) gets 200 `{"pong": true}`, Slack's `url_verification` its `challenge` back;
5. the firing: 202 with the run's id when it started; 409 while suspended or while a run is in
   flight under `Forbid`; 429 (with Retry-After) over `maxRunsPerMinute`; 422 when the message
   does not render (the run is recorded failed, naming the variable).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pallas_api.triggers.signature import SignatureError, verify
from pallas_io.triggers.runs import TriggerEngine, TriggerTarget

PATH = "/triggers/{namespace}/{name}"


@dataclass(frozen=True, slots=True)
class WebhookTrigger:
    """A webhook trigger and its shared secret."""

    target: TriggerTarget
    secret: bytes


class _TooLarge(Exception):
    pass


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=dict(headers or {}))


async def _bounded_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(media_type: str, body: bytes) -> object:
    """The body as the template's `.body`; ValueError when malformed, LookupError when unsupported."""
    if media_type == "application/json" or media_type.endswith("+json"):
        return json.loads(body)
    if media_type == "application/x-www-form-urlencoded":
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(body)))
    if not body:
        return None
    raise LookupError(media_type)


def _handshake(signature: str, headers: Mapping[str, str], body: object) -> JSONResponse | None:
    """The answer to a sender checking the endpoint (signed like any delivery), or None."""
    if signature == "github" and headers.get("x-github-event") == "ping":
        return JSONResponse({"pong": True})
    if signature == "slack" and isinstance(body, dict) and body.get("type") == "url_verification":
        return JSONResponse({"challenge": body.get("challenge")})
    return None


class WebhookEndpoint:
    """The routes of the webhook triggers of one process, keyed by namespace and name."""

    def __init__(self, triggers: Sequence[tuple[WebhookTrigger, TriggerEngine]]) -> None:
        self.route(triggers)

    def route(self, triggers: Sequence[tuple[WebhookTrigger, TriggerEngine]]) -> None:
        """Serve these triggers from the next request on (`pallas run --reload`)."""
        self._by_key = {(w.target.namespace, w.target.name): (w, engine) for w, engine in triggers}

    def app(self) -> Starlette:
        """The ASGI app serving `POST /triggers/<namespace>/<name>`."""
        return Starlette(routes=[Route(PATH, self.handle, methods=["POST"])])

    async def handle(self, request: Request) -> JSONResponse:
        """One delivery of a webhook."""
        key = (request.path_params["namespace"], request.path_params["name"])
        if key not in self._by_key:
            return _error(404, f"no webhook trigger {key[0]}/{key[1]} here")
        webhook, engine = self._by_key[key]
        spec = webhook.target.spec
        assert spec.webhook is not None  # only webhook triggers are routed
        try:
            body = await _bounded_body(request, spec.webhook.max_body_bytes)
        except _TooLarge:
            return _error(
                413, f"the body is larger than the trigger's maxBodyBytes ({spec.webhook.max_body_bytes})"
            )
        try:
            verify(spec.webhook.signature, webhook.secret, request.headers, body, time.time())
        except SignatureError as exc:
            return _error(401, f"signature check failed: {exc}")
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        try:
            parsed = _parse(media_type, body)
        except LookupError:
            return _error(
                415, f"cannot read a {media_type or 'untyped'} body: send application/json or a form"
            )
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, f"the body is not valid {media_type}: {exc}")
        if (handshake := _handshake(spec.webhook.signature, request.headers, parsed)) is not None:
            return handshake
        firing = await engine.fire({"body": parsed})
        if firing.fired == "started" and firing.run is not None:
            return JSONResponse({"run": firing.run.id, "outcome": "Running"}, status_code=202)
        if firing.fired == "failed" and firing.run is not None:
            return JSONResponse(
                {"run": firing.run.id, "outcome": "Failed", "error": firing.run.message}, status_code=422
            )
        if firing.fired == "dropped":
            return _error(429, f"more than maxRunsPerMinute ({spec.max_runs_per_minute}) runs this minute",
                          {"Retry-After": "60"})  # fmt: skip
        if firing.fired == "suspended":
            return _error(409, "the trigger is suspended")
        return _error(409, "a run is in flight and concurrencyPolicy is Forbid")
