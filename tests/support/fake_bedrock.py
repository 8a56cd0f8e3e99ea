"""A scripted fake of Amazon Bedrock's runtime serving Anthropic models, plain and streamed.

`POST /model/{model}/invoke` answers a Messages API body, as Bedrock does;
`POST /model/{model}/invoke-with-response-stream` answers `application/vnd.amazon.eventstream`:
one binary frame per Messages stream event (headers `:event-type: chunk`, `:content-type:
application/json`, `:message-type: event`; payload `{"bytes": <the event's JSON, base64>}`).
The request body is Bedrock's: no `model` (it is in the path), no `stream`, and an
`anthropic_version` field. A Bedrock API key arrives as a bearer token.
Errors are `{"message": …}` bodies with `x-amzn-ErrorType`, as Bedrock sends them; a
`BedrockException` step streams some text and then an `exception` frame.

`FakeConverse` is Bedrock's Converse API for every model family, its requests SigV4-signed (each
signature recomputed with botocore) and checked against the API reference's shapes; `FakeSts`
is STS's `AssumeRoleWithWebIdentity`, for credentials from a web-identity token file.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hmac
import json
import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from pallas_runtime.llm.event_stream import encode_frame
from tests.support import fake_llm
from tests.support.fake_llm import FakeAnthropic, FakeUsage, HttpError, RecordedRequest, Text, ToolCalls

_ERROR_TYPES = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
                429: "ThrottlingException", 503: "ServiceUnavailableException"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class BedrockException:
    """A stream that sends `text` and then fails with an `exception` frame of `kind`."""

    text: str
    kind: str = "modelStreamErrorException"
    message: str = "The model stream failed"


def chunk_frame(event: dict[str, Any]) -> bytes:
    """One Messages stream event as Bedrock frames it."""
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(event).encode()).decode()}).encode()
    headers = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
    return encode_frame(headers, payload)


SIGV4 = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[A-Z0-9]{16,128})/(?P<date>\d{8})/(?P<region>[a-z0-9-]+)"
    r"/(?P<service>[a-z0-9-]+)/aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), "
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)
"""The shape of a SigV4 `Authorization` header (AWS General Reference, "Signature Version 4")."""


@dataclass(frozen=True, slots=True)
class AwsKey:
    """Credentials the fake accepts: an access key, its secret, and its session token if any."""

    access_key: str
    secret_key: str
    token: str | None = None
    expired: bool = False
    """Bedrock answers 403 ExpiredTokenException for this key (its session has ended)."""


class SigV4Signed:
    """A fake whose completion requests must be SigV4-signed with one of `keys` (or carry the
    Bedrock API key `api_key` as a bearer); a refused request is answered as Bedrock does, and
    why it was refused is kept in `refusals`."""

    keys: dict[str, AwsKey]
    region: str
    api_key: str | None
    refusals: list[str]

    def _signed(self) -> bool:
        """Whether requests are checked here (else by the fake's own `_authorized`)."""
        return True

    async def _handle_completion(self, request: Request) -> Response:
        if self._signed() and (denied := self._signature_problem(request, await request.body())) is not None:
            await self._record(request)  # type: ignore[attr-defined]
            self.refusals.append(denied[1])
            return self._error(HttpError(denied[0], denied[1], type=denied[2], headers={}))  # type: ignore[attr-defined]
        return await super()._handle_completion(request)  # type: ignore[misc]

    def _authorized(self, recorded: RecordedRequest) -> bool:
        # Checked before (the signature needs the raw request).
        return True if self._signed() else super()._authorized(recorded)  # type: ignore[misc]

    def _signature_problem(self, request: Request, body: bytes) -> tuple[int, str, str] | None:
        authorization = request.headers.get("authorization", "")
        if self.api_key is not None and authorization == f"Bearer {self.api_key}":
            return None
        match = SIGV4.match(authorization)
        if match is None:
            return (
                403,
                f"the Authorization header is not SigV4's: {authorization[:40]!r}",
                "IncompleteSignatureException",
            )
        key = self.keys.get(match["key"])
        if key is None:
            return (
                403,
                "The security token included in the request is invalid.",
                "UnrecognizedClientException",
            )
        if match["service"] != "bedrock":
            return (
                403,
                f"Credential should be scoped to correct service: 'bedrock', not {match['service']!r}",
                "InvalidSignatureException",
            )
        if match["region"] != self.region:
            return (
                403,
                f"Credential should be scoped to a valid region, not {match['region']!r}.",
                "InvalidSignatureException",
            )
        signed = match["signed"].split(";")
        for needed in ("host", "x-amz-date"):
            if needed not in signed:
                return 403, f"SignedHeaders must include {needed}", "InvalidSignatureException"
        if key.token is not None and request.headers.get("x-amz-security-token") != key.token:
            return (
                403,
                "The security token included in the request is invalid.",
                "UnrecognizedClientException",
            )
        if not hmac.compare_digest(self._signature(request, body, key, match), match["signature"]):
            return (
                403,
                "The request signature we calculated does not match the signature you provided.",
                "InvalidSignatureException",
            )
        if key.expired:
            return 403, "The security token included in the request is expired", "ExpiredTokenException"
        return None

    def _signature(self, request: Request, body: bytes, key: AwsKey, match: re.Match[str]) -> str:
        """The signature botocore's SigV4 signer gives for this request as received."""
        raw = request.scope["raw_path"].decode()
        url = f"http://{request.headers['host']}{raw}"
        headers = {name: request.headers[name] for name in match["signed"].split(";")}
        signed = AWSRequest(method=request.method, url=url, data=body, headers=headers)
        signed.context["timestamp"] = request.headers["x-amz-date"]
        signer = SigV4Auth(
            Credentials(key.access_key, key.secret_key, key.token), match["service"], self.region
        )
        return signer.signature(signer.string_to_sign(signed, signer.canonical_request(signed)), signed)


class FakeBedrock(SigV4Signed, FakeAnthropic):
    """Bedrock's runtime API for Anthropic models (`anthropic.claude-…` ids).

    With `keys` its requests must be SigV4-signed with one of them (or carry `api_key` as a
    bearer), as `FakeConverse`'s are; without, `api_key` alone is checked.
    """

    completion_path = "/model"

    def __init__(self, *, keys: Sequence[AwsKey] = (), region: str = "us-east-1", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keys = {key.access_key: key for key in keys}
        self.region = region
        self.refusals: list[str] = []

    def _signed(self) -> bool:
        return bool(self.keys)

    def _routes(self) -> list[Route]:
        return [
            Route("/model/{model:path}/invoke", self._handle_completion, methods=["POST"]),
            Route(
                "/model/{model:path}/invoke-with-response-stream", self._handle_completion, methods=["POST"]
            ),
        ]

    @property
    def completions(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith("/model/")]

    def _render_reply(self, step: Text | ToolCalls, recorded: RecordedRequest) -> Response:
        model = recorded.path.removeprefix("/model/").rsplit("/", 1)[0]
        streamed = recorded.path.endswith("/invoke-with-response-stream")
        # The Anthropic fake renders the body; Bedrock's request had its model in the path.
        as_anthropic = dataclasses.replace(recorded, json={**(recorded.json or {}), "model": model})
        rendered = super()._render_reply(step, as_anthropic)
        assert isinstance(rendered, JSONResponse)
        body = json.loads(bytes(rendered.body))
        if not streamed:
            return JSONResponse(body, headers={"x-amzn-requestid": "fake-req"})
        self.streams.append([])
        return self._frames(self._events(body, step), step.interval, self.streams[-1])

    async def _respond(self, step: Any, recorded: RecordedRequest, render: Any) -> Response:
        if isinstance(step, BedrockException):
            return self._respond_exception(step, recorded)
        return await super()._respond(step, recorded, render)

    def _respond_exception(self, failure: BedrockException, recorded: RecordedRequest) -> Response:
        text = Text(failure.text)
        events = list(self._events_of(text, recorded))[:4]  # message_start, ping, block start, first delta
        exception = encode_frame(
            {
                ":exception-type": failure.kind,
                ":content-type": "application/json",
                ":message-type": "exception",
            },
            json.dumps({"message": failure.message}).encode(),
        )
        self.streams.append([])

        async def body() -> AsyncIterator[bytes]:
            for frame in [*(chunk_frame(e) for e in events), exception]:
                yield frame

        return StreamingResponse(body(), media_type="application/vnd.amazon.eventstream")

    def _events_of(self, step: Text, recorded: RecordedRequest) -> Iterator[dict[str, Any]]:
        model = recorded.path.removeprefix("/model/").rsplit("/", 1)[0]
        body = {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": step.text}], "stop_reason": "end_turn",
                "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}  # fmt: skip
        for event in self._events(body, step):
            yield json.loads(event.split("data: ", 1)[1])

    @staticmethod
    def _frames(events: Iterator[str], interval: float, sent: list[float]) -> StreamingResponse:
        """The SSE events the Anthropic fake would send, framed for Bedrock, paced."""

        async def paced() -> AsyncIterator[bytes]:
            for event in events:
                if interval:
                    await asyncio.sleep(interval)
                sent.append(time.monotonic())
                yield chunk_frame(json.loads(event.split("data: ", 1)[1]))

        return StreamingResponse(paced(), media_type="application/vnd.amazon.eventstream")

    def _error(self, error: HttpError) -> Response:
        return bedrock_error(error)


def bedrock_error(error: HttpError) -> Response:
    """An error as Bedrock answers it: `{"message": …}`, the kind in `x-amzn-ErrorType`."""
    kind = error.type or _ERROR_TYPES.get(error.status, "InternalServerException")
    headers = {
        "x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/",
        **error.headers,
    }
    return JSONResponse({"message": error.message}, status_code=error.status, headers=headers)


# --- the Converse API, SigV4-signed, and STS for web identity -------------------------------

CONVERSE = re.compile(r"^/model/(?P<model>[^/]+)/(?P<action>converse|converse-stream)$")
ROLES = ("user", "assistant")
BLOCKS = ("text", "image", "document", "video", "toolUse", "toolResult", "reasoningContent", "cachePoint")
INFERENCE = ("maxTokens", "temperature", "topP", "stopSequences")
CONVERSE_FIELDS = ("messages", "system", "inferenceConfig", "toolConfig", "guardrailConfig",
                   "additionalModelRequestFields", "additionalModelResponseFieldPaths",
                   "promptVariables", "requestMetadata", "performanceConfig")  # fmt: skip


def converse_shape_problem(body: Any) -> str | None:
    """What in a Converse request body departs from the API reference; None when it conforms."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    if unknown := set(body) - set(CONVERSE_FIELDS):
        return f"unknown fields {sorted(unknown)}"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    for index, message in enumerate(messages):
        if message.get("role") not in ROLES or not isinstance(message.get("content"), list):
            return f"messages[{index}] needs a role of user or assistant and a content list"
        if index and messages[index - 1]["role"] == message["role"]:
            return f"messages[{index}]: roles must alternate"
        for block in message["content"]:
            if len(block) != 1 or next(iter(block)) not in BLOCKS:
                return f"messages[{index}]: a content block is exactly one of {BLOCKS}: {block}"
            if "text" in block and not block["text"]:
                return f"messages[{index}]: a text block may not be empty"
            if "image" in block and (
                block["image"].get("format") not in ("png", "jpeg", "gif", "webp")
                or not isinstance(block["image"].get("source", {}).get("bytes"), str)
            ):
                return f"messages[{index}]: an image needs format and source.bytes (base64)"
    if messages[0]["role"] != "user":
        return "the first message must be the user's"
    system = body.get("system", [])
    if not isinstance(system, list) or any(
        set(block) - {"text", "cachePoint", "guardContent"} for block in system
    ):
        return "system must be a list of text blocks"
    if set(body.get("inferenceConfig", {})) - set(INFERENCE):
        return f"inferenceConfig takes only {INFERENCE}"
    for tool in body.get("toolConfig", {}).get("tools", []):
        spec = tool.get("toolSpec", {})
        if not spec.get("name") or not isinstance(spec.get("inputSchema", {}).get("json"), dict):
            return "each tool is a toolSpec with a name and inputSchema.json"
    return None


class FakeConverse(SigV4Signed, fake_llm._FakeServer):
    """Bedrock's runtime Converse API for any model family, requests signed with SigV4.

    `POST /model/{modelId}/converse` answers `{output: {message}, stopReason, usage, metrics}`;
    `…/converse-stream` answers event-stream frames (`:event-type` messageStart,
    contentBlockStart/Delta/Stop, messageStop, metadata; the payload the event's JSON). The
    `Authorization` header must have SigV4's shape, be scoped to the fake's region and the
    `bedrock` service, and its signature must be the one `keys`' secret gives (recomputed with
    botocore's signer); the session token must be sent with it. A Bedrock API key (`api_key`)
    may come as a bearer token instead. Bodies are checked against the API reference's shapes.
    """

    def __init__(self, *, keys: Sequence[AwsKey] = (), region: str = "us-east-1", api_key: str | None = None,
                 default: Any = None) -> None:  # fmt: skip
        super().__init__(default=default, api_key=api_key)
        self.keys = {key.access_key: key for key in keys}
        self.region = region
        self.refusals: list[str] = []
        """Why each refused request was refused."""

    def _routes(self) -> list[Route]:
        return [Route("/model/{model:path}/{action}", self._handle_completion, methods=["POST"])]

    @property
    def completions(self) -> list[RecordedRequest]:
        return [r for r in self.requests if CONVERSE.match(r.path)]

    def _render_reply(self, step: Text | ToolCalls, recorded: RecordedRequest) -> Response:
        if (problem := converse_shape_problem(recorded.json)) is not None:
            return self._error(HttpError(400, problem, headers={}))
        content: list[dict[str, Any]] = [{"text": step.text}] if step.text else []
        calls = step.calls if isinstance(step, ToolCalls) else ()
        for index, call in enumerate(calls):
            arguments = call.arguments if isinstance(call.arguments, dict) else json.loads(call.arguments)
            content.append({"toolUse": {"toolUseId": call.id or f"tooluse_{index}", "name": call.name,
                                        "input": arguments}})  # fmt: skip
        stop = step.stop_reason or ("tool_use" if calls else "end_turn")
        usage = step.usage if isinstance(step.usage, FakeUsage) else FakeUsage()
        wire_usage = {"inputTokens": usage.input, "outputTokens": usage.output,
                      "totalTokens": usage.input + usage.output, "cacheReadInputTokens": usage.cache_read,
                      "cacheWriteInputTokens": usage.cache_write}  # fmt: skip
        if recorded.path.endswith("/converse"):
            body = {"output": {"message": {"role": "assistant", "content": content}}, "stopReason": stop,
                    "usage": wire_usage, "metrics": {"latencyMs": 12}}  # fmt: skip
            return JSONResponse(body, headers={"x-amzn-requestid": "fake-req"})
        events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
        if step.text:
            for piece in fake_llm._pieces(step):
                events.append(("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": piece}}))
            events.append(("contentBlockStop", {"contentBlockIndex": 0}))
        for index, block in enumerate(content[1 if step.text else 0 :], start=1 if step.text else 0):
            use = block["toolUse"]
            start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
            events.append(("contentBlockStart", {"contentBlockIndex": index, "start": start}))
            for half in fake_llm._halves(json.dumps(use["input"])):
                events.append(
                    ("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": half}}})
                )
            events.append(("contentBlockStop", {"contentBlockIndex": index}))
        events.append(("messageStop", {"stopReason": stop}))
        events.append(("metadata", {"usage": wire_usage, "metrics": {"latencyMs": 12}}))
        self.streams.append([])
        sent = self.streams[-1]

        async def frames() -> AsyncIterator[bytes]:
            for kind, event in events:
                if step.interval:
                    await asyncio.sleep(step.interval)
                sent.append(time.monotonic())
                # Bedrock pads each event with `p` so lengths do not leak the text's.
                payload = json.dumps({**event, "p": "abcdefgh"}).encode()
                yield encode_frame({":event-type": kind, ":content-type": "application/json",
                                    ":message-type": "event"}, payload)  # fmt: skip

        return StreamingResponse(frames(), media_type="application/vnd.amazon.eventstream")

    async def _respond(self, step: Any, recorded: RecordedRequest, render: Any) -> Response:
        if not isinstance(step, BedrockException):
            return await super()._respond(step, recorded, render)
        # A stream that fails after its first text: the delta, then an `exception` frame.
        delta = {"contentBlockIndex": 0, "delta": {"text": step.text}}
        frames = [
            encode_frame({":event-type": "messageStart", ":message-type": "event"}, b'{"role":"assistant"}'),
            encode_frame(
                {":event-type": "contentBlockDelta", ":message-type": "event"}, json.dumps(delta).encode()
            ),
            encode_frame(
                {
                    ":exception-type": step.kind,
                    ":content-type": "application/json",
                    ":message-type": "exception",
                },
                json.dumps({"message": step.message}).encode(),
            ),
        ]

        async def body() -> AsyncIterator[bytes]:
            for frame in frames:
                yield frame

        return StreamingResponse(body(), media_type="application/vnd.amazon.eventstream")

    def _models_response(self, recorded: RecordedRequest) -> Response:
        return self._error(HttpError(404, "bedrock-runtime has no models endpoint", headers={}))

    def _error(self, error: HttpError) -> Response:
        return bedrock_error(error)


class FakeSts(fake_llm.RecordingServer):
    """STS's `AssumeRoleWithWebIdentity` (query protocol, XML answer), as botocore's web-identity
    provider calls it: it accepts `token` and hands out `key`'s credentials, valid an hour."""

    def __init__(self, *, token: str, key: AwsKey, role_arn: str) -> None:
        super().__init__()
        self.token, self.key, self.role_arn = token, key, role_arn
        self.calls: list[dict[str, str]] = []

    def _routes(self) -> list[Route]:
        return [Route("/", self._handle, methods=["POST"])]

    async def _handle(self, request: Request) -> Response:
        form = dict(parse_qsl((await request.body()).decode()))
        self.calls.append(form)
        if form.get("Action") != "AssumeRoleWithWebIdentity" or form.get("RoleArn") != self.role_arn:
            return Response(_sts_error("ValidationError", "unexpected request"), 400, media_type="text/xml")
        if form.get("WebIdentityToken") != self.token:
            return Response(
                _sts_error("InvalidIdentityToken", "Token is not valid"), 400, media_type="text/xml"
            )
        expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
        xml = (
            '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
            "<AssumeRoleWithWebIdentityResult><Credentials>"
            f"<AccessKeyId>{self.key.access_key}</AccessKeyId><SecretAccessKey>{self.key.secret_key}</SecretAccessKey>"
            f"<SessionToken>{self.key.token}</SessionToken><Expiration>{expiry}</Expiration></Credentials>"
            f"<AssumedRoleUser><Arn>{self.role_arn}/pallas</Arn><AssumedRoleId>AROAFAKE:pallas</AssumedRoleId>"
            "</AssumedRoleUser><SubjectFromWebIdentityToken>system:serviceaccount:agents:a</SubjectFromWebIdentityToken>"
            "</AssumeRoleWithWebIdentityResult><ResponseMetadata><RequestId>fake</RequestId></ResponseMetadata>"
            "</AssumeRoleWithWebIdentityResponse>"
        )
        return Response(xml, media_type="text/xml")


def _sts_error(code: str, message: str) -> str:
    return (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
        f"<Code>{code}</Code><Message>{message}</Message></Error><RequestId>fake</RequestId></ErrorResponse>"
    )
