"""The bridge answers its deployment's agents only: every request carries the deployment's credential.

A hosted stdio server's bridge used to answer anyone who reached its Service: no auth, access
list, approval, audit or budget applies there (those are the agents'), so a tool an agent only
calls after approval, or one returning a Secret-backed value, was anyone's. The deployment's
agents now send its bridge credential (`names.BRIDGE_TOKEN_HEADER`, from the Secret the operator
keeps, or the value `pallas run` makes for its run) on every request to its hosted servers, and
the bridge refuses a request without it, or with another value, with 401 before anything reads
it. The probes (`/healthz`, `/readyz`) stay open: the kubelet sends no credential and they tell
nothing about the server's tools.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from pallas_api import names
from pallas_runtime.edge.credential import refuse_request

log = logging.getLogger("pallas.stdio")

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Answered without the credential: the kubelet's probes."""
REFUSED = (
    f"this bridge serves its deployment's agents only: send the deployment's bridge credential in "
    f"the {names.BRIDGE_TOKEN_HEADER} header (Secret <deployment>-bridge-token, key "
    f"{names.BRIDGE_TOKEN_KEY})"
)
_HEADER = names.BRIDGE_TOKEN_HEADER.lower().encode()


class BridgeCredential:
    """ASGI wrapper: a request but the probes without exactly one right credential header gets 401."""

    def __init__(self, app: ASGIApp, token: Callable[[], str]) -> None:
        """Guard `app` with the credential `token()` gives now (read at each request: rotations).

        While it gives nothing (a Secret not there yet) every request is refused.
        """
        self._app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a request without the credential; pass the probes and the rest to the app."""
        if scope["type"] == "http" and scope.get("path") not in OPEN_PATHS and not self._admits(scope):
            client = scope.get("client") or ("?", 0)
            log.info(
                "refused a request to %s from %s: no or a wrong bridge credential", scope["path"], client[0]
            )
            await refuse_request(send, 401, "unauthorized", REFUSED)
            return
        await self._app(scope, receive, send)

    def _admits(self, scope: Scope) -> bool:
        sent = [value for name, value in scope.get("headers") or () if name.lower() == _HEADER]
        token = self._token().encode()
        # One value, compared in constant time: its length is all a failed try tells.
        return bool(token) and len(sent) == 1 and hmac.compare_digest(sent[0], token)


def token_file(path: Path) -> Callable[[], str]:
    """The credential in `path` (a pod's Secret volume file), read at each call; "" while absent.

    Read each time rather than once: the kubelet rewrites the file when the Secret is replaced
    (its rotation), and a few bytes on a tmpfs cost nothing beside a request.
    """

    def read() -> str:
        try:
            return path.read_text().strip()
        except OSError:
            return ""

    return read
