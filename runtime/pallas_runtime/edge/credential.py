"""One credential per request, and the one an agent forwards is the one it verified.

With two `Authorization` headers the libraries an agent is built on disagree about which one is
"the" credential: the MCP SDK's bearer check reads the first (Starlette's `Headers.get`), and
fastmcp's `get_http_headers()` builds a dict, so the last one wins. Alice's request carrying
bob's token second was verified as alice and forwarded as bob to every peer and downstream
server that takes the caller's credential. So:

- `SingleCredential` refuses a request with more than one `Authorization` header before
  anything reads it, with 400 `invalid_request` (RFC 6750 §3.1: a request that "repeats the
  same parameter" or "uses more than one method for including an access token");
- `forwarded_credential()` is what an agent sends on: with inbound auth the bearer of the
  access token the agent verified, never a header read again; without it, the one header sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from fastmcp.server.dependencies import get_access_token, get_http_headers
from starlette.types import ASGIApp, Receive, Scope, Send

AUTHORIZATION = b"authorization"
MORE_THAN_ONE = (
    "the request carries {count} Authorization headers; send exactly one credential "
    "(Authorization: Bearer <token>)"
)


class SingleCredential:
    """ASGI wrapper: a request with more than one `Authorization` header gets 400 at once."""

    def __init__(self, app: ASGIApp, on_refused: Callable[[], None]) -> None:
        self._app = app
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a request with several credentials here; pass everything else to the app."""
        if scope["type"] == "http":
            count = sum(1 for name, _ in scope.get("headers") or () if name.lower() == AUTHORIZATION)
            if count > 1:
                self._on_refused()
                await refuse_request(send, 400, "invalid_request", MORE_THAN_ONE.format(count=count))
                return
        await self._app(scope, receive, send)


async def refuse_request(send: Send, status: int, error: str, description: str) -> None:
    """Answer with `status` and an OAuth-style error body (RFC 6750 §3), nothing cached."""
    body = json.dumps({"error": error, "error_description": description}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def forwarded_credential(*, verified: bool) -> str | None:
    """The `Authorization` value to send on for the request being handled, or None.

    Args:
        verified: Whether the agent checks its callers. Then the value is exactly the bearer it
            verified (`Bearer <token>` of the request's access token); otherwise the request's
            one `Authorization` header as sent (`SingleCredential` lets no second one in).
    """
    if verified:
        token = get_access_token()
        return f"Bearer {token.token}" if token is not None else None
    return get_http_headers(include={"authorization"}).get("authorization")


def credential_values(authorization: str | None) -> tuple[str, ...]:
    """What of an `Authorization` value is the caller's secret: the whole value and its token.

    Scrubbed from tool results like the agent's own secrets: a server echoing the header may
    echo the token alone (`Bearer ` dropped, or quoted in a JSON string of its own).
    """
    if not authorization:
        return ()
    token = authorization.partition(" ")[2].strip()
    return (authorization, token) if token else (authorization,)
