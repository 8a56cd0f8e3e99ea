"""Error results with a machine-readable code (docs/api.md §3, `pallas_api.errors`).

A tool raises `CodedToolError`; `CodedErrors`, a middleware around every tool call, answers it,
fastmcp's argument errors and an unknown tool with an error result whose structured content is
`{"error": {"code", "message", "retryable", "category"}}`, the message being the text content again.
A prompt raises `CodedPromptError`; the middleware answers it with a JSON-RPC error whose `data`
is that same `error` object (a prompt has no error result to carry it).
"""

from __future__ import annotations

import logging
from typing import Any

from fastmcp.exceptions import NotFoundError, PromptError, ToolError
from fastmcp.exceptions import ValidationError as ArgumentsInvalid
from fastmcp.prompts import PromptResult
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import ToolResult
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, CallToolRequestParams, GetPromptRequestParams
from pydantic import ValidationError

from pallas_api.errors import RETRYABLE, ErrorCode, error_content
from pallas_api.validation import describe


class CodedToolError(ToolError):
    """A tool error with its machine-readable code (see `pallas_api.errors`)."""

    def __init__(
        self, message: str, code: ErrorCode, meta: dict[str, Any] | None = None, *, processed: bool = True
    ) -> None:
        super().__init__(message, log_level=logging.DEBUG)
        self.code = code
        self.meta = meta
        self.processed = processed


PromptContext = MiddlewareContext[GetPromptRequestParams]
NextPrompt = CallNext[GetPromptRequestParams, PromptResult]


class CodedPromptError(PromptError):
    """A prompt error with its machine-readable code, logged by whoever raises it (not by fastmcp)."""

    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message, log_level=logging.DEBUG)
        self.code = code


def error_result(
    code: ErrorCode, text: str, meta: dict[str, Any] | None = None, *, processed: bool = True
) -> ToolResult:
    """An error result: the text as content, `{"error": {"code", "message"}}` as structured content.

    A raised ToolError reaches the client as text alone; a returned result keeps the code.
    """
    structured = error_content(code, text, processed=processed)
    return ToolResult(content=text, structured_content=structured, is_error=True, meta=meta)


class CodedErrors(Middleware):
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
        """Answer the call's argument, coded and unknown-tool errors as coded error results."""
        try:
            return await call_next(context)
        except ArgumentsInvalid as exc:
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            text = f"{context.message.name}: invalid arguments: {describe(cause, limit=5)}"
            return error_result(ErrorCode.INVALID_ARGUMENTS, text)
        except CodedToolError as exc:
            return error_result(exc.code, str(exc), exc.meta, processed=exc.processed)
        except NotFoundError:
            return error_result(ErrorCode.TOOL_NOT_FOUND, f"Unknown tool: {context.message.name!r}")

    async def on_get_prompt(self, context: PromptContext, call_next: NextPrompt) -> PromptResult:
        """Answer a coded prompt error as a JSON-RPC error carrying the coded `error` in its data."""
        try:
            return await call_next(context)
        except CodedPromptError as exc:
            # What the request named is wrong or not there (SEP-2164: invalid params), unless the
            # agent could not answer it now (its store down: a retryable internal error).
            rpc = INTERNAL_ERROR if exc.code in RETRYABLE else INVALID_PARAMS
            raise MCPError(rpc, str(exc), error_content(exc.code, str(exc))["error"]) from None
