"""The bearer `pallas chat` and `pallas run` present to agents: given, or minted for a ServiceAccount.

Where it comes from, first match wins:

- `--token TOKEN` (or `--bearer`, its older name);
- `--as-serviceaccount NS/NAME`: a ten-minute token of that ServiceAccount from the TokenRequest
  API, with the current kubeconfig's credentials (`kubectl create token NAME -n NS`), for
  `--audience` when the agents accept only a dedicated audience;
- the environment variable `PALLAS_TOKEN`.

The token is never printed; errors name the ServiceAccount and the API server's reason.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping

import httpx2
from lightkube import ApiError, AsyncClient, ConfigError, KubeConfig
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ServiceAccount

from pallas_api.names import DNS_LABEL_FORM

TOKEN_ENV = "PALLAS_TOKEN"
LIFETIME = 600
_SERVICE_ACCOUNT = re.compile(rf"^({DNS_LABEL_FORM})/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$")
"""`namespace/name`: the namespace a DNS label, the ServiceAccount a DNS subdomain."""


class CredentialsError(Exception):
    """No usable bearer; `usage` when the flags themselves are wrong."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def add_token_arguments(parser: argparse.ArgumentParser, *, what: str) -> None:
    """`--token`, `--as-serviceaccount` and `--audience`, described for `what` uses the token."""
    parser.add_argument(
        "--token",
        "--bearer",
        dest="token",
        metavar="TOKEN",
        help=f"bearer token {what} (default: ${TOKEN_ENV})",
    )
    parser.add_argument(
        "--as-serviceaccount",
        metavar="NS/NAME",
        help=f"mint a token of this ServiceAccount with the kubeconfig's credentials (TokenRequest) {what}",
    )
    parser.add_argument(
        "--audience",
        action="append",
        default=[],
        metavar="AUD",
        help="audience of the minted token (repeatable; default: the API server's)",
    )


async def mint_token(
    namespace: str,
    name: str,
    audiences: list[str],
    *,
    lifetime: int = LIFETIME,
    config: KubeConfig | None = None,
) -> str:
    """A short-lived token of ServiceAccount `namespace/name` (TokenRequest API).

    Raises:
        CredentialsError: No kubeconfig, or the API server refused (names the reason).
    """
    try:
        client = AsyncClient(config=config or KubeConfig.from_env(), timeout=httpx2.Timeout(10.0))
    except ConfigError as exc:
        raise CredentialsError(
            f"--as-serviceaccount needs a kubeconfig or in-cluster credentials: {exc}"
        ) from None
    request = ServiceAccount.Token(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=TokenRequestSpec(audiences=audiences, expirationSeconds=lifetime),
    )
    try:
        answer = await client.create(request, name, namespace=namespace)
    except ApiError as exc:
        raise CredentialsError(
            f"cannot mint a token for ServiceAccount {namespace}/{name}: "
            f"{exc.status.message or exc.status.code}"
        ) from None
    except httpx2.HTTPError as exc:
        raise CredentialsError(f"cannot reach the API server to mint a token: {type(exc).__name__}") from None
    finally:
        await client.close()
    token = answer.status.token if answer.status is not None else None
    if not token:
        raise CredentialsError(f"the TokenRequest for {namespace}/{name} returned no token")
    return token


async def bearer_token(
    args: argparse.Namespace, environ: Mapping[str, str], *, lifetime: int = LIFETIME
) -> str | None:
    """The bearer to present, from the flags or the environment; None when there is none.

    Raises:
        CredentialsError: Both --token and --as-serviceaccount, a malformed NS/NAME, an empty
            token, or a TokenRequest that failed.
    """
    if args.token is not None and args.as_serviceaccount:
        raise CredentialsError("give either --token or --as-serviceaccount, not both", usage=True)
    if args.as_serviceaccount:
        match = _SERVICE_ACCOUNT.match(args.as_serviceaccount)
        if match is None:
            raise CredentialsError(
                f"--as-serviceaccount {args.as_serviceaccount!r}: expected NAMESPACE/NAME", usage=True
            )
        return await mint_token(match.group(1), match.group(3), list(args.audience), lifetime=lifetime)
    if args.token is None:
        return environ.get(TOKEN_ENV, "").strip() or None  # an empty variable counts as unset
    if not args.token.strip():
        raise CredentialsError("--token: the token is empty", usage=True)
    return str(args.token).strip()
