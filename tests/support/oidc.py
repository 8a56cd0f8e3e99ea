"""A real OpenID Connect issuer for tests: discovery document, JWKS, signed tokens.

    async with oidc_issuer() as issuer:
        token = issuer.token(sub="alice", groups=["research"])
        issuer.rotate()                      # publish a new key and sign with it from now on

It listens on 127.0.0.1, or where pods reach it (`oidc_issuer(host=<the node's bridge address>)`).
The keys are generated here (joserfc, the library fastmcp's verifier uses); nothing reaches the
internet. `issuer.requests` counts the JWKS fetches, so a test can see a rotation refetch.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.mcp_servers import LOOPBACK, serve_app

AUDIENCE = "pallas-agents"
REALM = "/realms/pallas"
"""The issuer lives under a path, as Keycloak's and most hosted issuers do."""


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


@dataclass
class Issuer:
    """The issuer's state; `url` is its issuer identifier (and base URL)."""

    url: str = ""
    keys: list[RSAKey | ECKey] = field(default_factory=list)
    """Published keys; the last one signs."""
    jwks_fetches: int = 0
    generation: int = 0

    def rotate(self, *, keep_old: bool = False) -> RSAKey:
        """Make a new signing key (kid `k<n>`); publish only it unless `keep_old`."""
        self.generation += 1
        key = RSAKey.generate_key(2048, parameters={"kid": f"k{self.generation}"}, private=True)
        self.keys = [*self.keys, key] if keep_old else [key]
        return key

    def claims(self, **overrides: Any) -> dict[str, Any]:
        """Valid claims for the agent, with `overrides` (None removes a claim)."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": "alice",
            "groups": ["research"],
            "iat": now,
            "nbf": now - 5,
            "exp": now + 300,
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, *, key: RSAKey | ECKey | None = None, alg: str = "RS256", **overrides: Any) -> str:
        """A token signed by `key` (default: the current key) with `claims(**overrides)`."""
        signer = key or self.keys[-1]
        header = {"alg": alg, "kid": signer.kid, "typ": "JWT"}
        return jwt.encode(header, self.claims(**overrides), signer, algorithms=[alg])

    def unsigned_token(self, **overrides: Any) -> str:
        """An `alg: none` token with valid claims: what a forger sends."""
        return f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(self.claims(**overrides))}."

    def jwks(self) -> dict[str, Any]:
        return {"keys": [key.as_dict(private=False) | {"use": "sig", "alg": "RS256"} for key in self.keys]}


@contextlib.asynccontextmanager
async def oidc_issuer(host: str = LOOPBACK) -> AsyncIterator[Issuer]:
    """Serve an issuer on a free port of `host` (loopback; for pods the node's bridge address)
    until the block ends."""
    issuer = Issuer()
    issuer.rotate()

    async def discovery(_: Request) -> Response:
        return JSONResponse(
            {
                "issuer": issuer.url,
                "jwks_uri": f"{issuer.url}/jwks",
                "id_token_signing_alg_values_supported": ["RS256"],
            }
        )

    async def jwks(_: Request) -> Response:
        issuer.jwks_fetches += 1
        return JSONResponse(issuer.jwks())

    app = Starlette(
        routes=[
            Route(f"{REALM}/.well-known/openid-configuration", discovery),
            Route(f"{REALM}/jwks", jwks),
        ]
    )
    async with serve_app(app, path=REALM, host=host) as running:
        issuer.url = running.url
        yield issuer
