"""Who a caller is and whether they may talk to this agent: the values every verifier returns.

A verifier (Kubernetes TokenReview + SubjectAccessReview, or an OIDC JWT) turns a bearer into a
`Decision`; `access_token()` turns a decision into the `AccessToken` fastmcp keeps for the request.
That token is the one place the identity travels inside the agent: tools read it with
`fastmcp.server.dependencies.get_access_token()` (the conversation owner is
`claims["sub"]`, falling back to `client_id`; the groups are `claims["groups"]`). The raw bearer
appears only in `AccessToken.token`, never in claims, logs, metrics or errors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fastmcp.server.auth import AccessToken
from starlette.authentication import AuthenticationError

from pallas_api.config import AccessConfig

INVOKE_SCOPE = "pallas.dev/invoke"
"""The scope a request carries once this agent has decided the caller may talk to it.

Never taken from a token: verifiers grant it from their own decision (RBAC `invoke`, or the
access lists), and fastmcp's `RequireAuthMiddleware` answers 403 `insufficient_scope` to an
authenticated caller without it, as the MCP authorization spec asks for a known caller that
lacks the right."""


class AuthUnavailable(AuthenticationError):
    """The caller cannot be checked right now (the API server or the issuer did not answer).

    The request fails closed with 503; the message says what is down, never the token.
    """


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller."""

    subject: str
    """Kubernetes user name (`system:serviceaccount:<ns>:<name>`) or the OIDC subject claim."""
    groups: tuple[str, ...] = ()
    issuer: str | None = None
    """The OIDC issuer; None for Kubernetes identities."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What a verifier concluded about one bearer."""

    caller: Caller
    allowed: bool
    expires_at: int | None = None
    """Unix time the bearer stops being valid, when known."""


def admits(access: AccessConfig, caller: Caller) -> bool:
    """Whether the access lists let `caller` in (both lists empty: every authenticated caller)."""
    if not access.subjects and not access.groups:
        return True
    return caller.subject in access.subjects or any(g in access.groups for g in caller.groups)


def string_list(value: object) -> tuple[str, ...]:
    """A claim that should list strings: a list of them, or one string; anything else is empty."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable) and not isinstance(value, bytes | dict):
        return tuple(v for v in value if isinstance(v, str))
    return ()


def access_token(token: str, decision: Decision) -> AccessToken:
    """The AccessToken fastmcp keeps for a request: identity in claims, the decision as a scope."""
    caller = decision.caller
    claims: dict[str, object] = {"sub": caller.subject, "groups": list(caller.groups)}
    if caller.issuer is not None:
        claims["iss"] = caller.issuer
    return AccessToken(
        token=token,
        client_id=caller.subject,
        scopes=[INVOKE_SCOPE] if decision.allowed else [],
        expires_at=decision.expires_at,
        subject=caller.subject,
        claims=claims,
    )
