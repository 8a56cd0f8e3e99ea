"""Google's two token sources behind Application Default Credentials, scripted.

`FakeMetadata` is the metadata server a GCE VM or a GKE pod under Workload Identity reaches at
169.254.169.254 (google-auth takes another host from `GCE_METADATA_HOST` and `GCE_METADATA_IP`):
every request must carry `Metadata-Flavor: Google`, and it answers that header back. It serves
the root (google-auth's ping), the project id, the default service account's info and its
access token (`{access_token, expires_in, token_type}`), each token minted anew.

`FakeOAuth` is the OAuth 2.0 token endpoint a service-account key file's `token_uri` names: it
takes the JWT bearer grant (RFC 7523) and verifies the assertion's RS256 signature with the key
pair's public half before it hands out a token; `refuse` makes it answer `invalid_grant`.
"""

from __future__ import annotations

import base64
import itertools
import json
import time
from typing import Any
from urllib.parse import parse_qsl

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support import fake_llm

FLAVOR = {"Metadata-Flavor": "Google"}
SERVICE_ACCOUNT = "agents@pallas-test.iam.gserviceaccount.com"
JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"


class _TokenServer(fake_llm.RecordingServer):
    """What both token sources share: tokens `ya29.<prefix>-<n>`, valid `expires_in` seconds."""

    def __init__(self, *, prefix: str, expires_in: int) -> None:
        super().__init__()
        self.expires_in = expires_in
        self.minted: list[str] = []
        self._serial = itertools.count(1)
        self._prefix = prefix

    def _mint(self) -> dict[str, Any]:
        self.minted.append(f"ya29.{self._prefix}-{next(self._serial)}")
        return {"access_token": self.minted[-1], "expires_in": self.expires_in, "token_type": "Bearer"}


class FakeMetadata(_TokenServer):
    """The GCE / GKE metadata server's root and its default service account."""

    def __init__(self, *, project: str = "pallas-test", expires_in: int = 3599) -> None:
        super().__init__(prefix="metadata", expires_in=expires_in)
        self.project = project
        self.paths: list[str] = []

    @property
    def address(self) -> str:
        """What `GCE_METADATA_HOST` and `GCE_METADATA_IP` are set to: `127.0.0.1:port`."""
        return self.url.removeprefix("http://")

    def _routes(self) -> list[Route]:
        return [Route("/{path:path}", self._handle, methods=["GET", "POST"])]

    async def _handle(self, request: Request) -> Response:
        path = request.url.path
        self.paths.append(path)
        if request.headers.get("metadata-flavor") != "Google":
            return Response("Missing Metadata-Flavor:Google header.", 403, headers=FLAVOR)
        accounts = "/computeMetadata/v1/instance/service-accounts/"
        # After its first answer google-auth asks by the account's email instead of `default`.
        account = next(
            (accounts + a + "/" for a in ("default", SERVICE_ACCOUNT) if path.startswith(accounts + a + "/")),
            "",
        )
        if path in ("", "/"):
            return Response("computeMetadata/\n", headers=FLAVOR)
        if path == "/computeMetadata/v1/project/project-id":
            return Response(self.project, media_type="application/text", headers=FLAVOR)
        if account and path == account:
            info = {"aliases": ["default"], "email": SERVICE_ACCOUNT, "scopes": [
                "https://www.googleapis.com/auth/cloud-platform"]}  # fmt: skip
            return JSONResponse(info, headers=FLAVOR)
        if account and path == account + "token":
            return JSONResponse(self._mint(), headers=FLAVOR)
        if path == "/computeMetadata/v1/universe/universe-domain":
            return Response("googleapis.com", media_type="application/text", headers=FLAVOR)
        return Response("Not found", 404, headers=FLAVOR)


class FakeOAuth(_TokenServer):
    """An OAuth 2.0 token endpoint taking a service account's signed JWT (`/token`)."""

    def __init__(self, *, expires_in: int = 3599) -> None:
        super().__init__(prefix="oauth", expires_in=expires_in)
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.refuse = False
        self.assertions: list[dict[str, Any]] = []
        """The claims of each assertion whose signature checked out."""

    def key_file(self, project: str = "pallas-test") -> dict[str, Any]:
        """A service-account key file (the JSON `gcloud iam service-accounts keys create` writes)."""
        pem = self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return {
            "type": "service_account",
            "project_id": project,
            "private_key_id": "0123456789abcdef",
            "private_key": pem.decode(),
            "client_email": SERVICE_ACCOUNT,
            "client_id": "100000000000000000001",
            "token_uri": f"{self.url}/token",
        }

    def _routes(self) -> list[Route]:
        return [Route("/token", self._handle, methods=["POST"])]

    async def _handle(self, request: Request) -> Response:
        form = dict(parse_qsl((await request.body()).decode()))
        if form.get("grant_type") != JWT_GRANT or "assertion" not in form:
            return JSONResponse({"error": "unsupported_grant_type"}, 400)
        claims = self._verified(form["assertion"])
        if claims is None or self.refuse:
            return JSONResponse(
                {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}, 400
            )
        self.assertions.append(claims)
        return JSONResponse(self._mint())

    def _verified(self, assertion: str) -> dict[str, Any] | None:
        header, claims, signature = assertion.split(".")
        try:
            self.key.public_key().verify(
                _unb64(signature), f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except InvalidSignature:
            return None
        decoded: dict[str, Any] = json.loads(_unb64(claims))
        if decoded.get("exp", 0) < time.time() or decoded.get("iss") != SERVICE_ACCOUNT:
            return None
        return decoded


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
