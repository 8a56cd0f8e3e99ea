"""`mode: kubernetes`: a TokenReview says who the caller is, a SubjectAccessReview whether they may.

The caller may talk to agent `<name>` when RBAC allows verb `invoke` on `pallasagents/<name>`
(group `pallas.dev`) in the agent's namespace: `kubectl create role talk --verb=invoke
--resource=pallasagents.pallas.dev --resource-name=<name>` grants it. The agent's own
ServiceAccount needs exactly `tokenreviews: create` and `subjectaccessreviews: create` (the
operator binds the built-in `system:auth-delegator` ClusterRole to it). Credentials come from
`KubeConfig.from_env()`: the pod's ServiceAccount (its rotated projected token), else the
kubeconfig (`pallas run`).

An API server that cannot be asked (down, slow, or refusing the agent's own requests) is
`AuthUnavailable`: the request fails closed with 503, naming what failed and never the token.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from dataclasses import dataclass
from typing import TypeVar

import httpx2
from lightkube import ApiError, AsyncClient, ConfigError, KubeConfig
from lightkube.models.authentication_v1 import TokenReviewSpec
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

from pallas_api import names
from pallas_api.config import INVOKE_VERB, AccessConfig, KubernetesAuthConfig
from pallas_runtime.auth.identity import AuthUnavailable, Caller, Decision, admits

_Review = TypeVar("_Review", TokenReview, SubjectAccessReview)

log = logging.getLogger("pallas.auth")
TIMEOUT = 5.0
"""Seconds one review may take; a slower API server answers the caller 503 rather than hang."""
IN_CLUSTER_API = "https://kubernetes.default.svc"


def api_server_url() -> str:
    """Where this process's Kubernetes tokens come from (named in the RFC 9728 metadata)."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return IN_CLUSTER_API
    try:
        single = KubeConfig.from_env().get()
    except (ConfigError, OSError, ValueError):
        return IN_CLUSTER_API
    server = single.cluster.server if single is not None else None
    return str(server) if server else IN_CLUSTER_API


def token_expiry(token: str) -> int | None:
    """The `exp` of a JWT bearer, read without verification: only to stop caching at expiry.

    The TokenReview has already judged the token; a bearer that is not a JWT has no known end.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return int(exp) if isinstance(exp, int | float) else None


def _refused(what: str, exc: ApiError) -> AuthUnavailable:
    status = exc.status
    detail = f"{status.code} {status.reason or ''}".strip()
    message = (status.message or "")[:200]
    hint = ""
    if status.code == 403:
        hint = " (the agent's ServiceAccount needs tokenreviews and subjectaccessreviews: create)"
    return AuthUnavailable(
        f"access checks unavailable: the API server refused the {what} ({detail}: {message}){hint}"
    )


@dataclass(frozen=True, slots=True)
class Reviewed:
    """A caller the API server authenticated, with what a SubjectAccessReview about them needs."""

    caller: Caller
    extra: dict[str, list[str]] | None = None
    uid: str | None = None


class KubernetesJudge:
    """Decides with a TokenReview and a SubjectAccessReview per (uncached) bearer."""

    def __init__(
        self,
        agent: str,
        namespace: str,
        settings: KubernetesAuthConfig,
        access: AccessConfig,
        *,
        config: KubeConfig | None = None,
    ) -> None:
        """Set up; nothing is read or sent until the first review.

        Args:
            agent: The agent's name (the SubjectAccessReview's resource name).
            namespace: The agent's namespace.
            settings: Audiences and caching.
            access: The agent's access lists, a further restriction on top of RBAC.
            config: Credentials; default `KubeConfig.from_env()`.
        """
        self._agent = agent
        self._namespace = namespace
        self._audiences = list(settings.audiences)
        self.access = access
        self._config = config
        self._client: AsyncClient | None = None

    def _api(self) -> AsyncClient:
        if self._client is None:
            try:
                config = self._config or KubeConfig.from_env()
            except ConfigError as exc:
                raise AuthUnavailable(
                    f"access checks unavailable: no Kubernetes credentials (in-cluster or kubeconfig): {exc}"
                ) from None
            self._client = AsyncClient(config=config, timeout=httpx2.Timeout(TIMEOUT))
        return self._client

    async def judge(self, token: str) -> Decision | None:
        """The decision for `token`; None when the API server does not accept it.

        Raises:
            AuthUnavailable: The API server could not be asked.
        """
        reviewed = await self.authenticate(token)
        if reviewed is None:
            return None
        allowed = admits(self.access, reviewed.caller) and await self.may_invoke(
            reviewed, self._agent, self._namespace
        )
        return Decision(reviewed.caller, allowed, token_expiry(token))

    async def authenticate(self, token: str) -> Reviewed | None:
        """Who `token` is (a TokenReview), or None when the API server does not accept it for us.

        Raises:
            AuthUnavailable: The API server could not be asked.
        """
        review = TokenReview(spec=TokenReviewSpec(token=token, audiences=self._audiences or None))
        result = await self._review(review, "TokenReview")
        status = result.status
        if status is None or not status.authenticated or status.user is None or not status.user.username:
            return None
        if self._audiences and not set(status.audiences or ()) & set(self._audiences):
            # An authenticator that ignores audiences said yes; the token is not meant for us.
            return None
        user = status.user
        caller = Caller(subject=str(user.username), groups=tuple(user.groups or ()))
        return Reviewed(caller, user.extra, user.uid)

    async def may_invoke(self, reviewed: Reviewed, agent: str, namespace: str) -> bool:
        """Whether RBAC lets `reviewed` `invoke` agent `namespace/agent` (a SubjectAccessReview).

        The agent asks this about itself; the registry's fleet endpoint about each agent it lists.

        Raises:
            AuthUnavailable: The API server could not be asked.
        """
        caller = reviewed.caller
        review = SubjectAccessReview(
            spec=SubjectAccessReviewSpec(
                user=caller.subject,
                groups=list(caller.groups),
                uid=reviewed.uid,
                extra=reviewed.extra,
                resourceAttributes=ResourceAttributes(
                    group=names.GROUP,
                    resource=names.AGENT_PLURAL,
                    verb=INVOKE_VERB,
                    name=agent,
                    namespace=namespace,
                ),
            )
        )
        result = await self._review(review, "SubjectAccessReview")
        return bool(result.status is not None and result.status.allowed)

    async def _review(self, review: _Review, kind: str) -> _Review:
        """Create a review; a refusal or an API server that does not answer is AuthUnavailable."""
        try:
            return await self._api().create(review)
        except ApiError as exc:
            raise _refused(kind, exc) from None
        except httpx2.HTTPError as exc:
            raise AuthUnavailable(
                f"access checks unavailable: the API server did not answer the {kind} ({type(exc).__name__})"
            ) from None

    async def aclose(self) -> None:
        """Close the API connection."""
        if self._client is not None:
            await self._client.close()
            self._client = None
