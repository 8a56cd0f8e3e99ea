"""`mode: oidc`: a JWT of the configured issuer, checked with fastmcp's `JWTVerifier`.

fastmcp's verifier (joserfc underneath) checks the signature against the issuer's JWKS, `iss`,
`aud` and `exp`, refetches the key set when a token names an unknown key id (rotation; at most
once per `jwksRefreshSeconds`) and refuses unsupported critical headers. It takes one algorithm,
so there is one verifier per allowed algorithm and the token's header picks it: an algorithm
not on the list (`none`, HMAC, anything unexpected) is refused before any key is looked at.
On top of it this module requires `exp`, honours `nbf`, and reads the caller from the
configured subject and groups claims.

The JWKS URL is `jwksURL`, else `jwks_uri` of the issuer's discovery document, fetched on first
use (whose `issuer` must equal the configured one, as OpenID Connect Discovery requires).
"""

from __future__ import annotations

import time

import httpx2
from fastmcp.server.auth.providers.jwt import JWTVerifier
from fastmcp.utilities.auth import decode_jwt_header

from pallas_api.config import AccessConfig, OidcConfig
from pallas_runtime.auth.identity import AuthUnavailable, Caller, Decision, admits, string_list

NBF_LEEWAY = 30
"""Seconds a token may be used before its `nbf`, for clocks a little apart."""
DISCOVERY_RETRY = 10.0
"""Seconds a failed discovery is remembered before the issuer is asked again."""


class OidcJudge:
    """Decides from a JWT's signature, standard claims and the agent's access lists."""

    def __init__(self, settings: OidcConfig, access: AccessConfig) -> None:
        """Set up; nothing is fetched until the first token arrives."""
        self._settings = settings
        self.access = access
        self._jwks_url = settings.jwks_url
        self._verifiers: dict[str, JWTVerifier] = {}
        self._discovery_failed: tuple[float, str] | None = None

    async def _discover(self) -> str:
        if self._jwks_url is not None:
            return self._jwks_url
        failed = self._discovery_failed
        if failed is not None and time.monotonic() - failed[0] < DISCOVERY_RETRY:
            raise AuthUnavailable(failed[1])
        issuer = self._settings.issuer.rstrip("/")
        url = f"{issuer}/.well-known/openid-configuration"
        try:
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(5.0)) as client:
                response = await client.get(url)
                response.raise_for_status()
                document = response.json()
            if document.get("issuer") != self._settings.issuer:
                raise ValueError(f"it names issuer {document.get('issuer')!r}")
            jwks = document.get("jwks_uri")
            if not isinstance(jwks, str) or not jwks.startswith(("https://", "http://")):
                raise ValueError("it has no jwks_uri")
        except (httpx2.HTTPError, ValueError, AttributeError) as exc:
            reason = str(exc) if isinstance(exc, ValueError) else type(exc).__name__
            message = (
                f"access checks unavailable: the issuer's discovery document {url} is not usable ({reason})"
            )
            self._discovery_failed = (time.monotonic(), message[:400])
            raise AuthUnavailable(message[:400]) from None
        self._jwks_url = jwks
        return jwks

    async def _verifier(self, algorithm: str) -> JWTVerifier:
        verifier = self._verifiers.get(algorithm)
        if verifier is None:
            verifier = JWTVerifier(
                jwks_uri=await self._discover(),
                issuer=self._settings.issuer,
                audience=self._settings.audience,
                algorithm=algorithm,
                jwks_refresh_interval=self._settings.jwks_refresh_seconds,
            )
            self._verifiers[algorithm] = verifier
        return verifier

    async def judge(self, token: str) -> Decision | None:
        """The decision for `token`; None when it is not a valid token of the issuer for us.

        Raises:
            AuthUnavailable: The issuer's discovery document could not be read.
        """
        try:
            algorithm = decode_jwt_header(token).get("alg")
        except ValueError:
            return None
        if not isinstance(algorithm, str) or algorithm not in self._settings.algorithms:
            return None
        verified = await (await self._verifier(algorithm)).verify_token(token)
        if verified is None:
            return None
        claims = verified.claims
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if not isinstance(exp, int | float):
            return None  # a bearer that never expires is not accepted
        if nbf is not None and (not isinstance(nbf, int | float) or nbf > time.time() + NBF_LEEWAY):
            return None
        subject = claims.get(self._settings.subject_claim)
        if not isinstance(subject, str) or not subject:
            return None
        caller = Caller(
            subject=subject,
            groups=string_list(claims.get(self._settings.groups_claim)),
            issuer=self._settings.issuer,
        )
        return Decision(caller, admits(self.access, caller), int(exp))

    async def aclose(self) -> None:
        """Nothing to close: each JWKS fetch uses a client of its own."""
