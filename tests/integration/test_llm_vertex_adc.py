"""Vertex AI providers without `apiKey`: tokens minted from Application Default Credentials.

google-auth walks Google's chain for real: a service-account key file named by
`GOOGLE_APPLICATION_CREDENTIALS` (its JWT signed with a throwaway RSA key, exchanged at a fake
token endpoint that verifies the signature), or the metadata server of a GCE VM or a GKE pod
under Workload Identity (a fake one, reached through `GCE_METADATA_HOST`). The scripted Vertex
fakes must see each minted token as the bearer.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from pallas_api.config import parse_config
from pallas_runtime.llm.factory import create_provider
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import TextPart, UserMessage
from tests.support.fake_gemini import FakeGemini
from tests.support.fake_google import FakeMetadata, FakeOAuth
from tests.support.fake_llm import Text
from tests.support.fake_vertex import FakeVertex

CLAUDE = "claude-sonnet-4-6@20260101"
GEMINI = "gemini-3-pro-preview"
HI = [UserMessage((TextPart("hi"),))]


@pytest.fixture
def no_ambient_credentials(monkeypatch, tmp_path):
    """Nothing of this machine's own Google credentials: an empty gcloud config, no key file."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    # Off the metadata server unless a test points google-auth at its fake one.
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_TIMEOUT", "1")
    monkeypatch.setenv("GCE_METADATA_DETECT_RETRIES", "1")


@pytest.fixture
async def metadata(monkeypatch, no_ambient_credentials):
    async with FakeMetadata() as fake:
        monkeypatch.setenv("GCE_METADATA_HOST", fake.address)
        monkeypatch.setenv("GCE_METADATA_IP", fake.address)
        # google-auth reads GCE_METADATA_HOST once, when its metadata module is first imported
        # (a pod sets it before the process starts); this process imported it already.
        from google.auth.compute_engine import _metadata

        monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", fake.address)
        yield fake


@pytest.fixture
async def oauth(monkeypatch, tmp_path, no_ambient_credentials):
    async with FakeOAuth() as fake:
        key_file = tmp_path / "key.json"
        key_file.write_text(json.dumps(fake.key_file()))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
        yield fake


@pytest.fixture
async def providers():
    made: list[Any] = []

    def make(base_url: str, *, kind: str = "anthropic") -> Any:
        region = "us-east5" if kind == "anthropic" else "us-central1"
        provider = {"name": "vertex", "type": kind, "platform": "vertex", "region": region}
        provider |= {"projectId": "pallas-test", "baseURL": base_url, "maxRetries": 0}
        model = CLAUDE if kind == "anthropic" else GEMINI
        made.append(create_provider(parse_config({"name": "a", "model": model, "provider": provider}), {}))
        return made[-1]

    yield make
    for provider in made:
        await provider.aclose()


async def test_claude_on_vertex_without_a_key_sends_the_metadata_servers_token_refreshed_before_expiry(
    metadata, providers
):
    # Under Workload Identity the GKE metadata server hands out the bound Google service account's
    # tokens. These expire in 2 minutes: inside google-auth's margin, so each request mints anew.
    metadata.expires_in = 120
    async with FakeVertex(models=[CLAUDE]) as vertex:
        provider = providers(vertex.base_url)
        vertex.script(Text("one"), Text("two"))
        assert (await provider.complete(system="", messages=HI, tools=[])).text == "one"
        assert (await provider.complete(system="", messages=HI, tools=[])).text == "two"
        check = await provider.preflight()
        assert check.ok, check.message
    assert metadata.minted == ["ya29.metadata-1", "ya29.metadata-2", "ya29.metadata-3"]
    sent = [r.headers["authorization"] for r in vertex.requests]
    assert sent == [f"Bearer {token}" for token in metadata.minted]
    token_calls = [p for p in metadata.paths if p.endswith("/token")]
    assert len(token_calls) == 3


async def test_gemini_on_vertex_without_a_key_reuses_a_token_until_it_nears_its_end(metadata, providers):
    async with FakeGemini(models=[GEMINI]) as gemini:
        provider = providers(gemini.vertex_base_url, kind="gemini")
        gemini.script(Text("one"), Text("two"))
        assert (await provider.complete(system="", messages=HI, tools=[])).text == "one"
        assert (await provider.complete(system="", messages=HI, tools=[])).text == "two"
        assert (await provider.preflight()).ok
    assert metadata.minted == ["ya29.metadata-1"]  # valid an hour: minted once
    assert {r.headers["authorization"] for r in gemini.requests} == {"Bearer ya29.metadata-1"}
    assert all("x-goog-api-key" not in r.headers for r in gemini.requests)


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
async def test_a_service_account_key_file_mints_tokens_with_its_signed_jwt(oauth, providers, kind):
    fake = FakeVertex(models=[CLAUDE]) if kind == "anthropic" else FakeGemini(models=[GEMINI])
    async with fake as vertex:
        base_url = vertex.base_url if kind == "anthropic" else vertex.vertex_base_url
        provider = providers(base_url, kind=kind)
        vertex.script(Text("signed"))
        assert (await provider.complete(system="", messages=HI, tools=[])).text == "signed"
    assert oauth.minted == ["ya29.oauth-1"]
    [claims] = oauth.assertions  # the signature checked out against the key file's public half
    assert claims["scope"] == "https://www.googleapis.com/auth/cloud-platform"
    assert vertex.requests[-1].headers["authorization"] == "Bearer ya29.oauth-1"


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
async def test_a_refused_or_rejected_minted_token_shows_in_the_health_check_and_never_the_secret(
    oauth, providers, kind, caplog
):
    caplog.set_level(logging.DEBUG)
    fake = FakeVertex(models=[CLAUDE]) if kind == "anthropic" else FakeGemini(models=[GEMINI])
    async with fake as vertex:
        base_url = vertex.base_url if kind == "anthropic" else vertex.vertex_base_url
        provider = providers(base_url, kind=kind)
        oauth.refuse = True  # the key was deleted or disabled in IAM
        refused = await provider.preflight()
        assert not refused.ok
        assert f"{kind} provider 'vertex'" in refused.message
        assert "no Google access token from Application Default Credentials" in refused.message
        assert "invalid_grant: Invalid JWT Signature." in refused.message
        with pytest.raises(LLMError) as failed:
            await provider.complete(system="", messages=HI, tools=[])
        assert "invalid_grant" in str(failed.value)
        assert vertex.requests == []  # nothing went to Vertex without a token

        oauth.refuse = False
        vertex.api_key = "ya29.only-this-one"  # Vertex rejects the token minted (revoked, wrong scope)
        rejected = await provider.preflight()
        assert not rejected.ok
        assert "HTTP 401" in rejected.message
        assert "project pallas-test" in rejected.message
    private_key = json.loads(json.dumps(oauth.key_file()))["private_key"]
    pem_body = private_key.splitlines()[1]
    for text in (refused.message, str(failed.value), rejected.message, caplog.text):
        assert pem_body not in text
        for token in oauth.minted:
            assert token not in text
