"""Webhook signatures as GitHub, Slack and Pallas's own senders make them."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from pallas_api.triggers.signature import SignatureError, pallas_signature, verify

SECRET = b"It's a Secret to Everybody"
BODY = b"Hello, World!"
NOW = 1_765_000_000.0


def test_github_documented_example() -> None:
    """The example of GitHub's "Validating webhook deliveries" page."""
    signature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    verify("github", SECRET, {"X-Hub-Signature-256": signature}, BODY, NOW)
    with pytest.raises(SignatureError, match="X-Hub-Signature-256 header does not match"):
        verify("github", SECRET, {"x-hub-signature-256": signature}, BODY + b" ", NOW)


def _slack(stamp: int, body: bytes, secret: bytes = SECRET) -> dict[str, str]:
    base = b"v0:" + str(stamp).encode() + b":" + body
    return {
        "X-Slack-Request-Timestamp": str(stamp),
        "X-Slack-Signature": "v0=" + hmac.new(secret, base, hashlib.sha256).hexdigest(),
    }


def test_slack_v0_with_its_timestamp() -> None:
    verify("slack", SECRET, _slack(int(NOW), BODY), BODY, NOW)
    with pytest.raises(SignatureError, match="X-Slack-Signature header does not match"):
        verify("slack", SECRET, _slack(int(NOW), BODY, b"other"), BODY, NOW)


def test_slack_refuses_an_old_timestamp() -> None:
    with pytest.raises(SignatureError, match="not within 300s"):
        verify("slack", SECRET, _slack(int(NOW) - 301, BODY), BODY, NOW)


def test_plain_hmac_and_bearer() -> None:
    verify("hmac-sha256", SECRET, {"X-Pallas-Signature-256": pallas_signature(SECRET, BODY)}, BODY, NOW)
    verify("bearer", SECRET, {"Authorization": f"Bearer {SECRET.decode()}"}, BODY, NOW)
    with pytest.raises(SignatureError, match="Authorization header does not match"):
        verify("bearer", SECRET, {"Authorization": "Bearer nope"}, BODY, NOW)
    with pytest.raises(SignatureError, match="not a Bearer token"):
        verify("bearer", SECRET, {"Authorization": "Basic Zm9v"}, BODY, NOW)


@pytest.mark.parametrize("kind", ["github", "slack", "hmac-sha256", "bearer"])
def test_a_missing_header_is_named_and_no_value_is_repeated(kind: str) -> None:
    with pytest.raises(SignatureError, match="header is missing") as caught:
        verify(kind, SECRET, {}, BODY, NOW)  # type: ignore[arg-type]
    assert SECRET.decode() not in str(caught.value)


def test_an_empty_secret_accepts_nothing() -> None:
    with pytest.raises(SignatureError, match="secret is empty"):
        verify("hmac-sha256", b"", {"X-Pallas-Signature-256": pallas_signature(b"", BODY)}, BODY, NOW)
