"""SigV4 signatures for Bedrock's runtime, with the standard AWS credential chain of the pod.

Both Bedrock providers sign with it when no `apiKey` is given: `type: bedrock` (the Converse API,
`llm/bedrock_converse.py`) and `type: anthropic, platform: bedrock` (the Messages API through the
anthropic SDK, `llm/anthropic_bedrock.py`, whose own signing needs boto3, which the agent does not
ship). botocore resolves the chain: environment keys, a web-identity token file with
`AWS_ROLE_ARN` as IRSA mounts it, EKS Pod Identity's container endpoint, a shared config file, the
instance role. The chain's credentials refresh themselves before they expire; resolving them may
call STS, which botocore does synchronously, so it runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError, ClientError
from botocore.session import Session

from pallas_runtime.llm.errors import CredentialsUnavailable

SIGNING_NAME = "bedrock"
"""The service name Bedrock's runtime signs requests under (its endpoint is `bedrock-runtime`)."""


class AwsCredentialsError(CredentialsUnavailable):
    """The chain gave no credentials, or resolving them failed; the text holds no secret."""


class AwsSigner:
    """Signs requests to Bedrock in `region` with the chain's current credentials."""

    def __init__(self, region: str) -> None:
        self._region = region
        # The chain is resolved once and its credentials refresh themselves (web identity, pod
        # identity and instance roles expire): one botocore session per client, not per call.
        self._session = Session()

    async def sign(self, method: str, url: str, headers: Mapping[str, str], payload: bytes) -> dict[str, str]:
        """`headers` with SigV4's added (`Authorization`, `X-Amz-Date`, a session token's).

        Raises:
            AwsCredentialsError: No credentials to sign with.
        """
        request = AWSRequest(method=method, url=url, data=payload, headers=dict(headers))
        SigV4Auth(await self._credentials(), SIGNING_NAME, self._region).add_auth(request)
        return dict(request.headers.items())

    async def _credentials(self) -> Any:
        session = self._session

        def resolve() -> Any:
            # Frozen: one consistent key, secret and token, refreshed first when near expiry.
            found = session.get_credentials()
            return found.get_frozen_credentials() if found is not None else None

        try:
            credentials = await asyncio.to_thread(resolve)
        except (BotoCoreError, ClientError) as exc:
            raise AwsCredentialsError(f"AWS credentials could not be resolved: {exc}") from None
        if credentials is None:
            raise AwsCredentialsError(
                "no AWS credentials: none of the standard chain's sources (AWS_ACCESS_KEY_ID, a "
                "web-identity token file with AWS_ROLE_ARN, EKS Pod Identity, an instance role) "
                "gave any, and no apiKey is set"
            )
        return credentials
