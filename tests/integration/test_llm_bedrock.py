"""Amazon Bedrock: Anthropic through the anthropic SDK's Bedrock client (bearer API key), and every
model family through the Converse API signed with SigV4 from the AWS credential chain, against
fakes speaking Bedrock's and STS's wire formats (paths, event-stream frames, SigV4 headers)."""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest
from anthropic._constants import ANTHROPIC_API_VERSION

from pallas_api.config import parse_config
from pallas_api.fields import RequestParams
from pallas_runtime import messages as neutral
from pallas_runtime.llm.anthropic_bedrock import AnthropicBedrockProvider
from pallas_runtime.llm.bedrock_converse import BedrockConverseProvider
from pallas_runtime.llm.event_stream import EventStreamError, FrameReader, encode_frame
from pallas_runtime.llm.factory import create_provider
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import TextPart, ToolCall, Usage, UserMessage
from tests.support.fake_bedrock import AwsKey, BedrockException, FakeBedrock, FakeConverse, FakeSts
from tests.support.fake_llm import Call, FakeUsage, HttpError, Text, ToolCalls
from tests.support.llm_inputs import HI, SEARCH

KEY = "ABSKQmVkcm9ja0FQSUtleS1mYWtl"
MODEL = "anthropic.claude-opus-4-7-20260101-v1:0"


def collector(pieces: list[str]) -> Any:
    """An `on_text` that keeps each piece of streamed text in `pieces`."""

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    return on_text


async def answered(provider: Any, *, streamed: bool, **call: Any) -> tuple[Any, str]:
    """The completion of one call, and the text streamed to `on_text` on the way (with `streamed`)."""
    pieces: list[str] = []
    completion = await provider.complete(on_text=collector(pieces) if streamed else None, **call)
    return completion, "".join(pieces)


@pytest.fixture
async def closing():
    """Providers the test made, closed after it."""
    made: list[Any] = []
    yield made
    for provider in made:
        await provider.aclose()


@pytest.fixture
async def bedrock():
    async with FakeBedrock(api_key=KEY) as fake:
        yield fake


@pytest.fixture
def providers(closing):
    made = closing

    def make(
        base_url: str,
        environ: dict[str, str] | None = None,
        *,
        keyless: bool = False,
        region: str = "eu-central-1",
    ) -> AnthropicBedrockProvider:
        """A provider with the Bedrock API key in `environ`; with `keyless`, none (the AWS chain signs)."""
        provider = {"name": "bedrock", "type": "anthropic", "platform": "bedrock", "region": region}
        provider |= {"baseURL": base_url, "maxRetries": 0 if keyless else 1, "timeoutSeconds": 5}
        if not keyless:
            provider["apiKeyEnv"] = "KEY"
        cfg = parse_config({"name": "a", "model": MODEL, "provider": provider})
        made.append(create_provider(cfg, {"KEY": KEY} if environ is None else environ))
        assert isinstance(made[-1], AnthropicBedrockProvider)
        return made[-1]

    return make


@pytest.mark.parametrize("streamed", [False, True])
async def test_text_round_trip_plain_and_streamed(bedrock, providers, streamed):
    provider = providers(bedrock.url)
    bedrock.script(Text("Hello from Bedrock.", usage=FakeUsage(input=40, output=9, cache_read=8)))
    completion, streamed_text = await answered(
        provider, streamed=streamed, system="Be brief.", messages=HI, tools=[SEARCH],
        params=RequestParams(effort="xhigh"),
    )  # fmt: skip
    assert completion.text == "Hello from Bedrock."
    assert completion.usage == Usage(input=40, output=9, cache_read=8)
    assert completion.stop_reason == "end_turn"
    assert streamed_text == ("Hello from Bedrock." if streamed else "")
    [request] = bedrock.completions
    suffix = "invoke-with-response-stream" if streamed else "invoke"
    assert request.path == f"/model/{MODEL}/{suffix}"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert "model" not in request.json
    assert "stream" not in request.json
    assert request.json["anthropic_version"] == ANTHROPIC_API_VERSION  # the SDK's Bedrock client adds it
    assert request.json["system"] == "Be brief."
    assert request.json["output_config"] == {"effort": "xhigh"}  # Opus 4.7, matched under Bedrock's id
    assert request.json["tools"][0]["name"] == "web__search"


async def test_streamed_tool_calls(bedrock, providers):
    provider = providers(bedrock.url)
    bedrock.script(ToolCalls([Call("web__search", {"q": "pallas"}, id="toolu_1")], text="Searching."))

    async def ignore(piece: str) -> None:
        return None

    completion = await provider.complete(system="", messages=HI, tools=[SEARCH], on_text=ignore)
    assert completion.tool_calls == (ToolCall("toolu_1", "web__search", {"q": "pallas"}),)
    assert completion.text == "Searching."
    assert completion.stop_reason == "tool_use"


async def test_errors_are_mapped_retried_and_never_hold_the_key(bedrock, providers):
    provider = providers(bedrock.url)
    bedrock.script(HttpError(429, "Too many requests"), Text("after a retry"))
    assert (await provider.complete(system="", messages=HI, tools=[])).text == "after a retry"
    bedrock.script(HttpError(400, f"Malformed input request near {KEY}"))
    with pytest.raises(LLMError) as failed:
        await provider.complete(system="", messages=HI, tools=[])
    assert failed.value.status == 400
    assert (
        str(failed.value) == "anthropic provider 'bedrock': HTTP 400: Malformed input request near [redacted]"
    )


async def test_an_exception_frame_mid_stream_is_an_llm_error_after_the_text_before_it(
    bedrock, providers, converse, converse_providers, aws_env
):
    aws_env(STATIC)
    for fake, provider in ((bedrock, providers(bedrock.url)), (converse, converse_providers(converse.url))):
        fake.script(BedrockException("Half", kind="throttlingException", message="Too many tokens"))
        pieces: list[str] = []
        with pytest.raises(LLMError, match="throttlingException: Too many tokens"):
            await provider.complete(system="", messages=HI, tools=[], on_text=collector(pieces))
        assert pieces == ["Half"]


async def test_a_wrong_key_and_a_missing_one(bedrock, providers):
    wrong = providers(bedrock.url, {"KEY": "not-the-key"})
    with pytest.raises(LLMError, match="HTTP 401"):
        await wrong.complete(system="", messages=HI, tools=[])
    missing = providers(bedrock.url, {})
    check = await missing.preflight()
    assert not check.ok
    assert "no API key" in check.message
    assert (await providers(bedrock.url).preflight()).ok
    assert bedrock.completions[0].headers["authorization"] == "Bearer not-the-key"


def test_frames_round_trip_in_any_pieces_and_a_bad_checksum_is_refused():
    frames = encode_frame({":event-type": "chunk", "x": "é"}, b'{"a":1}') + encode_frame({}, b"")
    reader = FrameReader()
    got = [frame for byte in range(len(frames)) for frame in reader.feed(frames[byte : byte + 1])]
    assert [(f.headers, f.payload) for f in got] == [
        ({":event-type": "chunk", "x": "é"}, b'{"a":1}'),
        ({}, b""),
    ]
    broken = bytearray(encode_frame({}, b"payload"))
    broken[-6] ^= 0xFF
    with pytest.raises(EventStreamError, match="checksum"):
        FrameReader().feed(bytes(broken))


# --- the Converse API (type: bedrock): every model family, SigV4 from the AWS chain ---------

CONVERSE_MODEL = "meta.llama3-3-70b-instruct-v1:0"
STATIC = AwsKey("AKIAFAKESTATIC00001", "static-secret-0123456789")
SESSION = AwsKey("ASIAFAKESESSION0001", "session-secret-0123456789", token="session-token-1")
EXPIRED = AwsKey("ASIAFAKEEXPIRED0001", "expired-secret-0123456789", token="expired-token", expired=True)
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
_CHAIN = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
          "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_ENDPOINT_URL",
          "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_ENDPOINT_URL_STS", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
          "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_DEFAULT_REGION", "AWS_REGION")  # fmt: skip


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """The AWS chain's environment, cleared; nothing reaches the instance metadata service."""
    for name in _CHAIN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def keys(key: AwsKey) -> None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key.secret_key)
        if key.token is not None:
            monkeypatch.setenv("AWS_SESSION_TOKEN", key.token)

    return keys


@pytest.fixture
async def converse():
    async with FakeConverse(keys=[STATIC, SESSION, EXPIRED], region="eu-west-1") as fake:
        yield fake


@pytest.fixture
def converse_providers(closing):
    made = closing

    def make(url: str, *, region: str = "eu-west-1", key: str | None = None, model: str = CONVERSE_MODEL):
        provider: dict[str, Any] = {"name": "aws", "type": "bedrock", "region": region}
        provider |= {"baseURL": url, "maxRetries": 1, "timeoutSeconds": 5}
        if key is not None:
            provider["apiKeyEnv"] = "KEY"
        cfg = parse_config({"name": "a", "model": model, "provider": provider})
        made.append(create_provider(cfg, {"KEY": key} if key is not None else {}))
        assert isinstance(made[-1], BedrockConverseProvider)
        return made[-1]

    return make


@pytest.mark.parametrize("streamed", [False, True])
async def test_converse_text_round_trip_signed_with_sigv4(converse, converse_providers, aws_env, streamed):
    aws_env(STATIC)
    provider = converse_providers(converse.url)
    converse.script(Text("Hello from Llama.", usage=FakeUsage(input=40, output=9, cache_read=8)))
    sampling = RequestParams(temperature=0.2, topP=0.9, maxTokens=64, stop=["END"], topK=5)
    completion, streamed_text = await answered(
        provider, streamed=streamed, system="Be brief.", messages=HI, tools=[], params=sampling
    )
    assert converse.refusals == []
    assert (completion.text, completion.stop_reason) == ("Hello from Llama.", "end_turn")
    assert completion.usage == Usage(input=40, output=9, cache_read=8)
    assert streamed_text == ("Hello from Llama." if streamed else "")
    [request] = converse.completions
    action = "converse-stream" if streamed else "converse"
    assert request.path == f"/model/{CONVERSE_MODEL}/{action}"
    scope = f"AWS4-HMAC-SHA256 Credential={STATIC.access_key}/{time.strftime('%Y%m%d', time.gmtime())}"
    assert request.headers["authorization"].startswith(f"{scope}/eu-west-1/bedrock/aws4_request, ")
    assert request.json == {
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {"maxTokens": 64, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]},
        "additionalModelRequestFields": {"top_k": 5},
    }


@pytest.mark.parametrize("streamed", [False, True])
async def test_converse_tool_use_and_its_result(converse, converse_providers, aws_env, streamed):
    aws_env(SESSION)
    provider = converse_providers(converse.url, model="amazon.nova-pro-v1:0")
    converse.script(ToolCalls([Call("web__search", {"q": "pallas"}, id="tooluse_1")], text="Searching."))

    async def ignore(piece: str) -> None:
        return None

    completion = await provider.complete(
        system="",
        messages=HI,
        tools=[SEARCH],
        params=RequestParams(toolChoice="auto"),
        on_text=ignore if streamed else None,
    )
    assert converse.refusals == []
    assert completion.tool_calls == (ToolCall("tooluse_1", "web__search", {"q": "pallas"}),)
    assert completion.text == "Searching."
    assert completion.stop_reason == "tool_use"
    assert converse.completions[0].headers["x-amz-security-token"] == SESSION.token
    assert converse.completions[0].json["toolConfig"] == {
        "tools": [{"toolSpec": {"name": "web__search", "description": "Search the web",
                                "inputSchema": {"json": SEARCH.input_schema}}}],
        "toolChoice": {"auto": {}},
    }  # fmt: skip
    converse.script(Text("Found it."))
    history = [
        *HI,
        neutral.AssistantMessage("Searching.", completion.tool_calls),
        neutral.ToolResultsMessage(
            (neutral.ToolResult("tooluse_1", "web__search", (TextPart("pallas is a project"),)),)
        ),
    ]
    assert (await provider.complete(system="", messages=history, tools=[SEARCH])).text == "Found it."
    assert converse.completions[1].json["messages"] == [
        {"role": "user", "content": [{"text": "hi"}]},
        {"role": "assistant", "content": [
            {"text": "Searching."},
            {"toolUse": {"toolUseId": "tooluse_1", "name": "web__search", "input": {"q": "pallas"}}},
        ]},
        {"role": "user", "content": [{"toolResult": {
            "toolUseId": "tooluse_1", "content": [{"text": "pallas is a project"}], "status": "success"}}]},
    ]  # fmt: skip


async def test_converse_image(converse, converse_providers, aws_env):
    aws_env(STATIC)
    provider = converse_providers(converse.url, model="us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    converse.script(Text("A pixel."))
    message = UserMessage((TextPart("what is this?"), neutral.ImagePart(PIXEL, "image/png")))
    assert (await provider.complete(system="", messages=[message], tools=[])).text == "A pixel."
    assert converse.completions[0].json["messages"][0]["content"][1] == {
        "image": {"format": "png", "source": {"bytes": PIXEL}}
    }
    with pytest.raises(LLMError, match="png, jpeg, gif and webp images, not image/bmp"):
        await provider.complete(
            system="", messages=[UserMessage((neutral.ImagePart(PIXEL, "image/bmp"),))], tools=[]
        )


@pytest.mark.parametrize("api", ["converse", "messages"])
async def test_converse_credentials_from_a_web_identity_token_file(
    converse, converse_providers, signed_bedrock, providers, aws_env, monkeypatch, tmp_path, api
):
    # The same chain signs Claude's Messages API on Bedrock (type: anthropic, platform: bedrock).
    if api == "messages":
        converse = signed_bedrock
        converse_providers = functools.partial(providers, keyless=True)
    role = "arn:aws:iam::123456789012:role/pallas-agent"
    token_file = tmp_path / "token"
    token_file.write_text("projected-service-account-token")
    async with FakeSts(token="projected-service-account-token", key=SESSION, role_arn=role) as sts:
        # What IRSA puts in the pod's environment; STS is reached through AWS's endpoint override.
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
        monkeypatch.setenv("AWS_ROLE_ARN", role)
        monkeypatch.setenv("AWS_REGION", "eu-west-1")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        provider = converse_providers(converse.url)
        converse.script(Text("signed with the role's credentials"))
        completion = await provider.complete(system="", messages=HI, tools=[])
        assert converse.refusals == []
        assert completion.text == "signed with the role's credentials"
        assert [call["WebIdentityToken"] for call in sts.calls] == ["projected-service-account-token"]
        assert converse.completions[0].headers["x-amz-security-token"] == SESSION.token
        assert (await provider.preflight()).ok
        assert len(sts.calls) == 1  # the credentials are kept until they near expiry


async def test_converse_health_check_shows_an_expired_token_and_a_wrong_region(
    converse, converse_providers, aws_env
):
    aws_env(EXPIRED)
    check = await converse_providers(converse.url).preflight()
    assert not check.ok
    assert (
        "HTTP 403: ExpiredTokenException: The security token included in the request is expired"
        in check.message
    )
    assert EXPIRED.secret_key not in check.message
    assert EXPIRED.token not in check.message
    aws_env(STATIC)
    check = await converse_providers(converse.url, region="us-west-2").preflight()
    assert not check.ok
    assert "Credential should be scoped to a valid region" in check.message
    assert "region us-west-2" in check.message
    check = await converse_providers(converse.url).preflight()
    assert check.ok, check.message
    assert converse.completions[-1].json["inferenceConfig"] == {"maxTokens": 1}


async def test_converse_errors_retries_and_a_bedrock_api_key(converse, converse_providers, aws_env):
    converse.api_key = KEY
    provider = converse_providers(converse.url, key=KEY)
    converse.script(HttpError(429, "Too many requests"), Text("after a retry"))
    assert (await provider.complete(system="", messages=HI, tools=[])).text == "after a retry"
    assert converse.completions[-1].headers["authorization"] == f"Bearer {KEY}"
    converse.script(HttpError(400, f"Malformed input request near {KEY}"))
    with pytest.raises(LLMError) as failed:
        await provider.complete(system="", messages=HI, tools=[])
    assert failed.value.status == 400
    assert str(failed.value) == (
        "bedrock provider 'aws': HTTP 400: ValidationException: Malformed input request near [redacted]"
    )
    no_credentials = converse_providers(converse.url)
    with pytest.raises(LLMError, match="no AWS credentials"):
        await no_credentials.complete(system="", messages=HI, tools=[])


# --- Claude's Messages API on Bedrock (type: anthropic, platform: bedrock) without a key -----


@pytest.fixture
async def signed_bedrock():
    async with FakeBedrock(keys=[STATIC, SESSION, EXPIRED], region="eu-central-1") as fake:
        yield fake


@pytest.mark.parametrize("streamed", [False, True])
async def test_claude_on_bedrock_without_a_key_signs_with_sigv4_from_the_aws_chain(
    signed_bedrock, providers, aws_env, streamed
):
    aws_env(SESSION)
    provider = providers(signed_bedrock.url, keyless=True)
    signed_bedrock.script(Text("Signed."))
    completion, streamed_text = await answered(provider, streamed=streamed, system="", messages=HI, tools=[])
    assert signed_bedrock.refusals == []
    assert completion.text == "Signed."
    assert streamed_text == ("Signed." if streamed else "")
    [request] = signed_bedrock.completions
    assert request.path == f"/model/{MODEL}/{'invoke-with-response-stream' if streamed else 'invoke'}"
    scope = f"AWS4-HMAC-SHA256 Credential={SESSION.access_key}/{time.strftime('%Y%m%d', time.gmtime())}"
    assert request.headers["authorization"].startswith(f"{scope}/eu-central-1/bedrock/aws4_request, ")
    assert request.headers["x-amz-security-token"] == SESSION.token
    assert request.json["anthropic_version"] == ANTHROPIC_API_VERSION


async def test_claude_on_bedrock_health_check_reaches_bedrock_so_an_expired_token_or_wrong_region_shows(
    signed_bedrock, aws_env, bedrock, providers
):
    aws_env(EXPIRED)
    expired = await providers(signed_bedrock.url, keyless=True).preflight()
    assert not expired.ok
    assert expired.message.startswith(
        "anthropic provider 'bedrock': HTTP 403: The security token included in the request is expired"
    )
    aws_env(STATIC)
    wrong_region = await providers(signed_bedrock.url, keyless=True, region="us-west-2").preflight()
    assert not wrong_region.ok
    assert "Credential should be scoped to a valid region" in wrong_region.message
    assert "region us-west-2" in wrong_region.message
    good = await providers(signed_bedrock.url, keyless=True).preflight()
    assert good.ok, good.message
    assert "model 'anthropic.claude-opus-4-7-20260101-v1:0' answers" in good.message
    probe = signed_bedrock.completions[-1]
    assert probe.path == f"/model/{MODEL}/invoke"
    assert probe.json["max_tokens"] == 1  # one output token: the cheapest call that reaches the model
    # With a Bedrock API key the check reaches Bedrock too: an expired key shows.
    stale = await providers(bedrock.url, {"KEY": "ABSK-expired"}).preflight()
    assert not stale.ok
    assert "HTTP 401" in stale.message
    for check in (expired, wrong_region, stale):
        for secret in (EXPIRED.secret_key, EXPIRED.token, STATIC.secret_key, "ABSK-expired"):
            assert secret not in check.message
