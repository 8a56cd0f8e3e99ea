"""Malformed A2A params, answered as JSON-RPC invalid params (-32602) before the SDK reads them.

The a2a-sdk 1.3.0 dispatcher logs every request whose params it cannot read as an ERROR with a
traceback (`logger.exception`), so any client could fill an agent's log with them; and it answers
params that are not an object, and any A2A 0.3 params its pydantic models refuse, as an invalid
request (-32600), and a 0.3 file part whose bytes are not base64 as an internal error (-32603,
raised in its 0.3 → 1.0 conversion). This check reads the params first, with the SDK's own
models (the dispatcher's `METHOD_TO_MODEL` for 1.0, the 0.3 adapter's for 0.3, and the 0.3
conversion of a message), and answers what they refuse as invalid params, saying which field is
wrong and why, in the error format of the request's version; one INFO line names the method
(an A2A one; never anything else a client sent). Params that are not an object are refused so
for any method. Anything else goes to the SDK untouched (its JSON parse error, an unknown
method, a batch). The body is read once: Starlette keeps it on the request the SDK then reads.
"""

from __future__ import annotations

import binascii
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter
from a2a.server.jsonrpc_models import InvalidParamsError as V03InvalidParams
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import ParseDict, ParseError
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from pallas_api.validation import describe

Endpoint = Callable[[Request], Awaitable[Response]]

log = logging.getLogger("pallas.a2a")

V1_MODELS = JsonRpcDispatcher.METHOD_TO_MODEL
V03_MODELS = JSONRPC03Adapter.METHOD_TO_MODEL
V03_SENDS = frozenset({"message/send", "message/stream"})


def checking_params(endpoint: Endpoint) -> Endpoint:
    """`endpoint` (the SDK's JSON-RPC endpoint) behind the params check."""

    async def checked(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return await endpoint(request)  # the SDK answers the parse error
        if not isinstance(body, dict) or not isinstance(method := body.get("method"), str):
            return await endpoint(request)
        v03 = method in V03_MODELS
        problem = _v03_problem(method, body) if v03 else _v1_problem(method, body)
        if problem is None:
            return await endpoint(request)
        known = v03 or method in V1_MODELS
        log.info("A2A %s refused: invalid params", method if known else "request of an unknown method")
        request_id = body.get("id")
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            request_id = None
        error = V03InvalidParams(message=problem) if v03 else InvalidParamsError(message=problem)
        return JSONResponse(build_error_response(request_id, error))

    return checked


def _object_params(body: dict[str, Any]) -> dict[str, Any] | str:
    params = body.get("params", {})
    return params if isinstance(params, dict) else "params must be an object"


def _v1_problem(method: str, body: dict[str, Any]) -> str | None:
    """What is wrong with the params of an A2A 1.0 request (None: nothing, or not ours to say)."""
    params = _object_params(body)  # of any method: the SDK's base check logs a traceback too
    if isinstance(params, str):
        return params
    model = V1_MODELS.get(method)
    if model is None:
        return None  # the SDK answers an unknown method
    try:  # as the dispatcher parses them: unknown fields are ignored
        ParseDict(params, model(), ignore_unknown_fields=True)
    except ParseError as exc:
        return f"invalid params for {method}: {exc}"
    return None


def _v03_problem(method: str, body: dict[str, Any]) -> str | None:
    """What is wrong with the params of an A2A 0.3 request (None: nothing)."""
    params = _object_params(body)
    if isinstance(params, str):
        return params
    try:  # the adapter validates the whole request
        request = V03_MODELS[method].model_validate(body)  # type: ignore[attr-defined]
    except ValidationError as exc:
        return f"invalid params for {method}: {describe(exc, limit=5)}"
    if method in V03_SENDS:
        try:  # as the 0.3 handler converts a message, where a failure is an internal error
            conversions.to_core_send_message_request(request)
        except binascii.Error as exc:
            return f"invalid params for {method}: a file part's bytes are not base64 ({exc})"
        except (ParseError, ValueError, TypeError) as exc:
            return f"invalid params for {method}: {exc}"
    return None
