"""Short-lived ServiceAccount tokens for the operator's probes (TokenRequest API).

In `auth.mode: kubernetes` the operator verifies and health-checks agents as the deployment's
agents ServiceAccount: an identity the agents already hold, allowed to `invoke` exactly them.
Tokens last ten minutes (the API's minimum), carry the audiences the agents accept, and are
reused until two thirds of their life has passed; they are never logged or written anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lightkube import ApiError, AsyncClient
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ServiceAccount

if TYPE_CHECKING:
    from pallas_operator.k8s.cluster import Cluster

LIFETIME = 600
"""Seconds a probe token is valid: the shortest TokenRequest allows."""


class TokenUnavailable(Exception):
    """No token could be minted; the message says why (never a token)."""


@dataclass(frozen=True, slots=True)
class _Minted:
    token: str
    renew_at: float


async def mint_token(
    client: AsyncClient, namespace: str, service_account: str, audiences: Sequence[str], seconds: int
) -> str:
    """A new token of `namespace/service_account` for `audiences`, valid `seconds` (TokenRequest).

    Raises:
        TokenUnavailable: The TokenRequest was refused (e.g. the ServiceAccount is not there yet).
    """
    request = ServiceAccount.Token(
        metadata=ObjectMeta(name=service_account, namespace=namespace),
        spec=TokenRequestSpec(audiences=list(audiences), expirationSeconds=seconds),
    )
    try:
        answer = await client.create(request, service_account, namespace=namespace)
    except ApiError as exc:
        raise TokenUnavailable(
            f"cannot mint a probe token for ServiceAccount {namespace}/{service_account}: "
            f"{exc.status.code} {exc.status.message or ''}".strip()
        ) from None
    token = answer.status.token if answer.status is not None else ""
    if not token:
        raise TokenUnavailable(f"the TokenRequest for {namespace}/{service_account} returned no token")
    return token


class ProbeTokens:
    """Mints and reuses probe tokens per (namespace, ServiceAccount, audiences)."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._tokens: dict[tuple[str, str, tuple[str, ...]], _Minted] = {}

    async def token(self, namespace: str, service_account: str, audiences: Sequence[str]) -> str:
        """A valid token of `namespace/service_account` for `audiences` (empty: the API server's).

        Raises:
            TokenUnavailable: The TokenRequest was refused (e.g. the ServiceAccount is not there yet).
        """
        key = (namespace, service_account, tuple(audiences))
        minted = self._tokens.get(key)
        if minted is not None and time.monotonic() < minted.renew_at:
            return minted.token
        token = await self._cluster.mint_token(namespace, service_account, audiences, LIFETIME)
        self._tokens[key] = _Minted(token, time.monotonic() + LIFETIME * 2 / 3)
        return token

    def forget(self, namespace: str, service_account: str) -> None:
        """Drop the tokens of a ServiceAccount (its deployment left kubernetes mode or is gone)."""
        for key in [k for k in self._tokens if k[:2] == (namespace, service_account)]:
            del self._tokens[key]
