"""Google OAuth access tokens from Application Default Credentials, for Vertex AI without a key.

A Vertex provider that names no `apiKey` sends a token that google-auth mints from Google's
standard chain (`google.auth.default`): `GOOGLE_APPLICATION_CREDENTIALS` (a service-account key
file, or a workload identity federation config), gcloud's user credentials, then the metadata
server: a GCE instance's service account or, on GKE with Workload Identity, the Google service
account the pod's Kubernetes ServiceAccount is bound to (`iam.gke.io/gcp-service-account`), as
the GKE metadata server hands it out. `GCE_METADATA_HOST` and `GCE_METADATA_IP` point google-auth
at another metadata server.

The token is minted on first use and again before each request that finds it expired or close
to it (google-auth counts a token as expired 3m45s before its end), so a turn never sends a
token that runs out in flight. Minting is blocking HTTP (google-auth's requests transport), so it
runs in a worker thread, one at a time: concurrent turns wait for one token, not mint several.
google-auth is imported on first use only (it is in the image through a2a-sdk's google-api-core,
and pinned in pyproject); providers with a key never load it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2

from pallas_runtime.llm.errors import CredentialsUnavailable

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
"""The scope Vertex AI's prediction API takes."""


class GoogleCredentialsError(CredentialsUnavailable):
    """No access token could be had; the text is safe to show (no key, no token)."""


class GoogleToken:
    """The current access token of Application Default Credentials, refreshed before it expires."""

    def __init__(self) -> None:
        self._credentials: Any = None
        self._lock = asyncio.Lock()

    async def bearer(self) -> str:
        """A token valid for some minutes yet.

        Raises:
            GoogleCredentialsError: The chain found no credentials, or minting was refused.
        """
        credentials = self._credentials
        if credentials is not None and credentials.valid:  # most calls: no thread, no lock
            return str(credentials.token)
        async with self._lock:
            return await asyncio.to_thread(self._fresh)

    def _fresh(self) -> str:
        import google.auth
        from google.auth.exceptions import GoogleAuthError
        from google.auth.transport.requests import Request

        try:
            if self._credentials is None:
                self._credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
            if not self._credentials.valid:
                self._credentials.refresh(Request())
        except (GoogleAuthError, ValueError, OSError) as exc:
            raise GoogleCredentialsError(
                f"no Google access token from Application Default Credentials: {_reason(exc)}"
            ) from None
        return str(self._credentials.token)

    async def authorize(self, request: httpx2.Request) -> None:
        """Send `request` with the token as its bearer."""
        request.headers["Authorization"] = f"Bearer {await self.bearer()}"


def _reason(exc: Exception) -> str:
    """The failure's own words: its first argument.

    google-auth adds the response as a second argument; the first already sums it up.
    """
    first = exc.args[0] if exc.args else exc
    return f"{type(exc).__name__}: {first}"
