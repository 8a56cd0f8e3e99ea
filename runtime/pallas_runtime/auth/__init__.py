"""Inbound access control of an agent (docs/api.md §6, docs/runtime.md "Access control").

`build_auth(config, metrics)` returns the fastmcp auth provider for the agent's mode, or None
for `mode: none`. The modes' verifiers are `kubernetes` (TokenReview + SubjectAccessReview) and
`oidc` (JWTs); `provider` puts them on the MCP authorization spec.
"""

from __future__ import annotations

from pallas_api.config import AgentConfig
from pallas_runtime.auth.cache import DecisionCache
from pallas_runtime.auth.identity import INVOKE_SCOPE, AuthUnavailable, Caller, Decision
from pallas_runtime.auth.judge import Judge
from pallas_runtime.auth.provider import PallasAuth, PallasVerifier
from pallas_runtime.metrics import RuntimeMetrics

OIDC_CACHE_SECONDS = 30
"""JWT decisions are reused this long (or until `exp`): a verified signature does not change."""

__all__ = ["INVOKE_SCOPE", "AuthUnavailable", "Caller", "Decision", "PallasAuth", "build_auth"]


def build_auth(config: AgentConfig, metrics: RuntimeMetrics) -> PallasAuth | None:
    """The auth provider of `config.auth.mode`; None when the agent is open (`none`)."""
    auth = config.auth
    if auth.mode == "none" or auth.resource is None:
        return None
    judge: Judge
    if auth.mode == "kubernetes":
        from pallas_runtime.auth.kubernetes import KubernetesJudge, api_server_url

        judge = KubernetesJudge(config.name, auth.namespace, auth.kubernetes, auth.access)
        ttl: float = auth.kubernetes.cache_seconds
        servers = [api_server_url()]
    else:
        from pallas_runtime.auth.oidc import OidcJudge

        if auth.oidc is None:  # pragma: no cover - AuthConfig's validator requires it
            raise ValueError("auth.mode oidc needs auth.oidc")
        judge = OidcJudge(auth.oidc, auth.access)
        ttl = OIDC_CACHE_SECONDS
        servers = [auth.oidc.issuer]
    verifier = PallasVerifier(config.name, judge, DecisionCache(ttl), metrics)
    return PallasAuth(
        verifier, resource=auth.resource, authorization_servers=servers, resource_name=config.display_title
    )
