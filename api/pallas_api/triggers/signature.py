"""Webhook signatures, checked on the raw body before anything reads it.

- `github`: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`;
- `slack`: `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">` with
  `X-Slack-Request-Timestamp` within five minutes of now (Slack's own replay window);
- `hmac-sha256`: `X-Pallas-Signature-256: sha256=<hex HMAC-SHA256 of the body>` (GitHub's form
  under Pallas's name; the deliveries of `spec.deliver.webhook` are signed the same way);
- `bearer`: `Authorization: Bearer <the secret>`.

Every comparison is constant-time. A failure says which header is missing or wrong, never a
value: the error reaches the caller and the logs.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Literal, get_args

SignatureKind = Literal["github", "slack", "hmac-sha256", "bearer"]
SIGNATURE_KINDS: tuple[SignatureKind, ...] = get_args(SignatureKind)
PALLAS_SIGNATURE = "X-Pallas-Signature-256"
SLACK_WINDOW_SECONDS = 300
"""How old a Slack request may be: Slack's documented replay window."""


class SignatureError(Exception):
    """A request whose signature does not hold; the message names the header, not its value."""


def hmac_hex(secret: bytes, payload: bytes) -> str:
    """The hex HMAC-SHA256 of `payload`."""
    return hmac.new(secret, payload, hashlib.sha256).hexdigest()


def pallas_signature(secret: bytes, body: bytes) -> str:
    """The `X-Pallas-Signature-256` value of a body (for deliveries and for tests of senders)."""
    return "sha256=" + hmac_hex(secret, body)


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    raise SignatureError(f"the {name} header is missing")


def _same(given: str, expected: str, name: str) -> None:
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise SignatureError(f"the {name} header does not match the body")


def verify(kind: SignatureKind, secret: bytes, headers: Mapping[str, str], body: bytes, now: float) -> None:
    """Check one request's signature; return quietly when it holds.

    Args:
        kind: How the sender signs.
        secret: The shared secret (for `bearer`, the token itself).
        headers: The request's headers (any case).
        body: The body exactly as received.
        now: Unix time, for Slack's replay window.

    Raises:
        SignatureError: it does not hold; the message names the header at fault.
    """
    if not secret:
        raise SignatureError("the trigger's secret is empty")
    if kind == "github":
        _same(
            _header(headers, "X-Hub-Signature-256"), "sha256=" + hmac_hex(secret, body), "X-Hub-Signature-256"
        )
    elif kind == "hmac-sha256":
        _same(_header(headers, PALLAS_SIGNATURE), pallas_signature(secret, body), PALLAS_SIGNATURE)
    elif kind == "slack":
        stamp = _header(headers, "X-Slack-Request-Timestamp")
        if not stamp.isdigit() or abs(now - int(stamp)) > SLACK_WINDOW_SECONDS:
            raise SignatureError(
                f"X-Slack-Request-Timestamp is not within {SLACK_WINDOW_SECONDS}s of now (a replay?)"
            )
        expected = "v0=" + hmac_hex(secret, b"v0:" + stamp.encode() + b":" + body)
        _same(_header(headers, "X-Slack-Signature"), expected, "X-Slack-Signature")
    else:
        scheme, _, token = _header(headers, "Authorization").partition(" ")
        if scheme.lower() != "bearer":
            raise SignatureError("the Authorization header is not a Bearer token")
        _same(token.strip(), secret.decode("utf-8", "replace"), "Authorization")
